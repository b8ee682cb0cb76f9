//go:build gracekit_mutant_dropdelete

package sd

// mutantDropDelete plants a bug (see mutant.go); the chaos suite must catch it.
const mutantDropDelete = true
