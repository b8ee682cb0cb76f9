//go:build gracekit_mutant_skipflush

package shutdown

// mutantSkipFlush plants a bug for the chaos suite's mutation mode: the
// stop skips the gateway flush.
const mutantSkipFlush = true
