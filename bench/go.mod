module github.com/gracekit/gracekit/bench

go 1.25.0

require (
	github.com/go-kit/kit v0.13.0
	github.com/go-kit/log v0.2.0
	github.com/go-zookeeper/zk v1.0.4
	github.com/gracekit/gracekit v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.47.0
	google.golang.org/grpc v1.84.0
)

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/go-logfmt/logfmt v0.5.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

// Built against the library in this repository, so that the library's own
// go.mod carries none of the benchmarks' dependencies.
replace github.com/gracekit/gracekit => ../
