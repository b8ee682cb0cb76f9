//go:build gracekit_mutant_noreread

package sd

// mutantNoReread plants a bug (see mutant.go); the chaos suite must catch it.
const mutantNoReread = true
