//go:build gracekit_mutant_norecreate

package sd

// mutantNoRecreate plants a bug (see mutant.go); the chaos suite must catch it.
const mutantNoRecreate = true
