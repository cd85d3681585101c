// Package e2edeploy tests the deployment files under deploy/ and the
// Containerfile against the real binary (issue 25): it builds the static
// release binary once, builds the image from it with podman (or docker)
// without pulling anything, runs three replica containers of it against a
// PostgreSQL on the host, kills one with kill -9 and checks the takeover
// from what the jobs recorded themselves; it checks the systemd units, the
// Kubernetes manifests, the Prometheus rules and the Grafana dashboard
// against the binary's constants and a live replica's /metrics. It has
// only tests. deploy/README.md says how to run them.
package e2edeploy
