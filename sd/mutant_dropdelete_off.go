//go:build !gracekit_mutant_dropdelete

package sd

// mutantDropDelete is false: the bug of mutant_dropdelete.go is not planted.
const mutantDropDelete = false
