//go:build !gracekit_mutant_noreread

package sd

// mutantNoReread is false: the bug of mutant_noreread.go is not planted.
const mutantNoReread = false
