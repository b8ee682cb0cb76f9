//go:build !gracekit_mutant_nozxid

package sd

// mutantNoZxid is false: the bug of mutant_nozxid.go is not planted.
const mutantNoZxid = false
