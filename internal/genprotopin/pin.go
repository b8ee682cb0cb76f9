//go:build gracekit_genproto_pin

// Package genprotopin keeps a split-era google.golang.org/genproto in the
// library's go.mod, so a user's module inherits it. go-kit v0.13.0 requires
// the monolithic genproto of 2021, which also holds googleapis/rpc/status;
// next to grpc-go's google.golang.org/genproto/googleapis/rpc that is an
// "ambiguous import" in a fresh module's go mod tidy. A newer genproto no
// longer holds those packages. The build tag keeps this file out of every
// build; go mod tidy still sees the import and keeps the requirement.
package genprotopin

import _ "google.golang.org/genproto/protobuf/api"
