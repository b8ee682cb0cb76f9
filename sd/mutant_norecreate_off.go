//go:build !gracekit_mutant_norecreate

package sd

// mutantNoRecreate is false: the bug of mutant_norecreate.go is not planted.
const mutantNoRecreate = false
