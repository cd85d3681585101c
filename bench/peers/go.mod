module github.com/studioctl/studioctl/bench/peers

go 1.26.8

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/robfig/cron/v3 v3.0.1
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
)
