//go:build gracekit_mutant_ignoredrain

package sd

// mutantIgnoreDrain plants a bug (see mutant.go); the chaos suite must catch it.
const mutantIgnoreDrain = true
