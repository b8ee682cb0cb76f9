// Package drive is the machinery the example drivers (examples/rollout,
// `make demo`, and examples/chaos, `make chaos`) share: child processes in
// their own process groups (Supervisor, Proc), their environment and build,
// waiting for them, the requests of the load with their idempotency keys,
// the providers' ledgers (PROVIDER_LEDGER, examples/CONTRACT.md) and small
// report helpers. What a driver prints and checks stays in the driver.
package drive
