//go:build !linux

package tasks_test

const fakeReplicaEnv = "STUDIOCTL_TASKS_FAKE_REPLICA"

func fakeReplica(string) int { return 2 }

const fakeSecretReplicaEnv = "STUDIOCTL_TASKS_FAKE_SECRET_REPLICA"

func fakeSecretReplica() int { return 2 }

const fakeArgsEnv = "STUDIOCTL_TASKS_FAKE_ARGS"

func fakeArgs() int { return 2 }

const fakePausedReplicaEnv = "STUDIOCTL_TASKS_FAKE_PAUSED_REPLICA"

func fakePausedReplica(string) int { return 2 }
