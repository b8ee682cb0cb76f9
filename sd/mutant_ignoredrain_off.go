//go:build !gracekit_mutant_ignoredrain

package sd

// mutantIgnoreDrain is false: the bug of mutant_ignoredrain.go is not planted.
const mutantIgnoreDrain = false
