package drive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ChildEnv is base without any variable a driver sets itself (GRACEKIT_*,
// PROVIDER_*, GATEWAY_*, and every key of vars), plus vars, in a stable
// order.
func ChildEnv(base []string, vars map[string]string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GRACEKIT_") || strings.HasPrefix(k, "PROVIDER_") || strings.HasPrefix(k, "GATEWAY_") {
			continue
		}
		if _, ok := vars[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// RandomHex returns 2n random hex digits.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Build compiles pkgs into dir, which it creates, with `go build -o dir/`
// ($GO, or go on the PATH); the compiler's output goes to stderr. Each
// binary is named after the last element of its package path.
func Build(ctx context.Context, dir string, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}
