//go:build !gracekit_mutant_skipflush

package shutdown

// mutantSkipFlush is false: the stop flushes the gateways.
const mutantSkipFlush = false
