// Package gwrun holds what the example gateways (examples/gateway and
// examples/cachedgw) share: their GATEWAY_* environment
// (examples/CONTRACT.md) and serving HTTP until the first SIGTERM or SIGINT.
package gwrun
