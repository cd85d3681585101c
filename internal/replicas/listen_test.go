package replicas

import "testing"

func TestExposureNamesEveryAddressBeyondLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"":                   "",
		"127.0.0.1:8080":     "",
		"127.0.0.2:8080":     "",
		"[::1]:8080":         "",
		"localhost:8080":     "",
		"0.0.0.0:8080":       "every interface",
		"[::]:8080":          "every interface",
		":8080":              "every interface",
		"10.0.0.5:8080":      "10.0.0.5:8080",
		"[fe80::1%eth0]:80":  "[fe80::1%eth0]:80",
		"status.example:443": "status.example:443",
	} {
		if got := Exposure(addr); got != want {
			t.Errorf("Exposure(%q) = %q, want %q", addr, got, want)
		}
	}
}
