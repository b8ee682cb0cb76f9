package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/history"
)

// Mutation mode (make chaos CHAOS_MUTANTS=1): the driver, the provider and
// the gateway are built with one planted bug at a time, an edit of a copy
// of the library's source (plantedEdits, mutations.go; the library itself
// carries none), and seeds whose schedules lean on the faults that
// exercise the bug run until the validator meant for it names it. It
// prints
//
//	MUTANT name=<m> caught=<yes|no> seeds=<n> by=<validator>
//	RESULT mode=mutants planted=<n> caught=<n>
//
// A violation of another validator is not a catch.

const (
	pkgChaos   = "github.com/gracekit/gracekit/examples/chaos"
	modLibrary = "github.com/gracekit/gracekit"
)

// tagFailpoints is the build tag of the robustness mode's builds.
const tagFailpoints = "gracekit_failpoints"

// mutant is one planted bug.
type mutant struct {
	name string   // its edits are plantedEdits[name]
	what string   // the bug
	by   []string // the validators meant to catch it
}

var mutants = []mutant{
	{"skipflush", "the stop skips the gateway flush (shutdown)", []string{"flush-ack", "flush-reach"}},
	{"dropdelete", "the Instancer drops one deletion in five (sd)", []string{history.CheckPhantom, history.CheckConvergence, history.CheckResurrection}},
	{"norecreate", "the Registrar never re-creates its node after an expiry (sd)", []string{history.CheckReregistration}},
	{"nozxid", "the watch session resumes without its last zxid (sd)", []string{history.CheckGoingBack, history.CheckResurrection}},
	{"ignoredrain", "the Registrar writes its status over an operator's drain (sd)", []string{"after-drain", "after-leave", history.CheckDrainHeld}},
	{"noreread", "the Instancer publishes its set after a reconnect before the re-read answered (sd)", []string{history.CheckConvergence, history.CheckPhantom, history.CheckResurrection}},
	{"sickunreported", "a provider's failed health check never reaches the registry (provider)", []string{history.CheckAfterSick}},
	{"forgetdrain", "the Registrar forgets an operator's drain when it re-creates its node after an expiry (sd)", []string{history.CheckDrainHeld, "after-drain"}},
	{"readyrace", "a provider's health recovery marks it ready while an operator's drain holds (provider)", []string{history.CheckDrainHeld, "after-drain"}},
	{"rampreset", "a rebuild of the Endpointer's set gives a ramping instance its full weight (endpoint)", []string{history.CheckRamp}},
	{"neverlost", "a refused session is never given up: no server is ever found behind it (sd)", []string{history.CheckRestored}},
	{"parentnolimit", "a parent's exists and create go without the reply limit and the caller's ctx (sd)", []string{history.CheckBounded}},
	{"nominup", "gracekit drain -min-up counts, then writes without a version check of what it counted (cmd/gracekit)", []string{history.CheckMinUp}},
}

const (
	mutantSeeds  = 2 // seeds tried per mutant before it is called not caught
	mutantRounds = 3
)

func mutantNamed(name string) (mutant, bool) {
	i := slices.IndexFunc(mutants, func(m mutant) bool { return m.name == name })
	if i < 0 {
		return mutant{}, false
	}
	return mutants[i], true
}

func mutantNames() []string {
	var out []string
	for _, m := range mutants {
		out = append(out, m.name)
	}
	return out
}

// biasSteps are a round of a schedule drawn for mutant name: the faults
// that exercise its bug, and only those, so that nothing else blinds the
// validator meant for it.
func biasSteps(name string, r *rand.Rand, sh scheduleShape) []step {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	var out []step
	switch name {
	case "skipflush": // graceful stops with the load running
		for g := range sh.groups {
			out = append(out, step{Kind: kSigterm, At: ms(0, 500), Group: g, Slot: r.IntN(sh.providers)})
		}
	case "dropdelete": // many deletions, and a provider's
		out = append(out, step{Kind: kBurst, At: ms(0, 300), N: 20, For: ms(1000, 2000)},
			step{Kind: kKill, At: ms(0, 500), Group: r.IntN(sh.groups), Slot: r.IntN(sh.providers)})
	case "norecreate": // expiries of registrations' sessions
		out = append(out, step{Kind: kExpireProvider, At: ms(0, 500), Group: r.IntN(sh.groups), Slot: r.IntN(sh.providers)},
			step{Kind: kExpireProvider, At: ms(0, 500), Slot: sh.providers})
	case "nozxid": // the in-process consumers reach a server behind them
		out = append(out, step{Kind: kStale, At: ms(0, 300), Slot: 0, N: min(3, sh.consumers), For: ms(1500, 2500)})
	case "ignoredrain": // operator drains under load, each held past the leave bound
		for g := range sh.groups {
			out = append(out, step{Kind: kDrain, At: ms(0, 500), Group: g, Slot: r.IntN(sh.providers), For: sh.sessionTimeout + robustBounds.Skew + ms(1500, 2500)}) // past after-drain's bound
		}
	case "sickunreported": // health faults long enough for both of after-sick's bounds
		for g := range sh.groups {
			out = append(out, step{Kind: kHealth, At: ms(0, 500), Group: g, Slot: r.IntN(sh.providers), For: ms(8000, 9500)})
		}
	case "forgetdrain": // drains held across an expiry of the drained provider's session
		for g := range sh.groups {
			out = append(out, step{Kind: kDrainExpire, At: ms(0, 500), Group: g, Slot: r.IntN(sh.providers), For: ms(3000, 5000)})
		}
	case "readyrace": // a health recovery while an operator's drain holds, long past the leave bound
		for g := range sh.groups {
			out = append(out, step{Kind: kDrainSick, At: ms(0, 500), Group: g, Slot: r.IntN(sh.providers), For: sh.sessionTimeout + robustBounds.Skew + ms(2000, 3000)})
		}
	case "nominup": // every provider of each group drained at once by an operator of its own, -min-up providers-1
		for g := range sh.groups {
			out = append(out, step{Kind: kMinUp, At: ms(0, 300), Group: g, Slot: r.IntN(sh.providers), N: sh.providers, For: ms(1500, 3000)})
		}
	case "rampreset": // a restart, then set rebuilds (a peer's drain and undrain) within its ramp
		for g := range sh.groups {
			out = append(out, step{Kind: kRestartDrain, At: ms(0, 300), Group: g, Slot: r.IntN(sh.providers), For: ms(1500, 2500)})
		}
	case "neverlost": // expiries before the restore the schedule ends with (biasRestore)
		for g := range sh.groups {
			out = append(out, step{Kind: kExpireProvider, At: ms(0, 500), Group: g, Slot: r.IntN(sh.providers)})
		}
	case "parentnolimit": // a new service's parent create loses its reply on a connection kept up
		out = append(out, step{Kind: kLostReply, At: ms(0, 500), Reply: "createContainer"})
	case "noreread": // consumers away longer than the bounds while a provider goes
		long := robustBounds.Converge + sh.sessionTimeout/2
		out = append(out, step{Kind: kResetLong, At: 0, Slot: 0, For: long}, step{Kind: kBlackholeLong, At: 0, Slot: 1, For: long},
			step{Kind: kSigterm, At: ms(800, 1200), Group: r.IntN(sh.groups), Slot: r.IntN(sh.providers)})
	}
	return out
}

// biasRestore is the restore a schedule drawn for mutant name ends with:
// the empty one, which every session that saw a write is refused by.
func biasRestore(name string) string {
	if name == "neverlost" {
		return restoreEmpty
	}
	return ""
}

// robustTags are the build tags of robustness mode's binaries: failpoints
// compiled in unless -failpoints=false.
func robustTags(cfg config) string {
	if cfg.noFailpoints {
		return ""
	}
	return tagFailpoints
}

func goCmd() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// buildTagged is drive.Build with build tags ("" for none).
func buildTagged(ctx context.Context, dir, tags string, pkgs ...string) error {
	return buildWith(ctx, dir, tags, "", pkgs...)
}

// buildWith is drive.Build with build tags ("" for none) and an overlay
// file for go build -overlay ("" for none).
func buildWith(ctx context.Context, dir, tags, overlay string, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"build"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(append(args, "-o", dir+string(filepath.Separator)), pkgs...)
	cmd := exec.CommandContext(ctx, goCmd(), args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// printViolated prints a line per validator that seed's history violated,
// for the mutation mode to read.
func printViolated(seed int64, vs []history.Violation) {
	n := map[string]int{}
	for _, v := range vs {
		n[v.Check]++
	}
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for k := range n {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Printf("VIOLATED seed=%d check=%s n=%d\n", seed, c, n[c])
	}
}

// parseViolated reads printViolated's lines: violations per validator.
func parseViolated(out []byte) map[string]int {
	got := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "VIOLATED ")
		if !ok {
			continue
		}
		var check string
		n := 0
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "check":
				check = v
			case "n":
				n, _ = strconv.Atoi(v)
			}
		}
		if check != "" {
			got[check] += n
		}
	}
	return got
}

// caughtBy is the first of m's validators that got names, "" if none.
func (m mutant) caughtBy(got map[string]int) string {
	for _, c := range m.by {
		if got[c] > 0 {
			return c
		}
	}
	return ""
}

// runMutants is the mutation mode.
func runMutants(cfg config) int {
	begin := time.Now()
	list := mutants
	if len(cfg.mutantList) > 0 {
		list = nil
		for _, name := range cfg.mutantList {
			m, _ := mutantNamed(name) // checked by parseFlags
			list = append(list, m)
		}
	}
	root, err := os.MkdirTemp("", "gracekit-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lib, err := libraryDir(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	seeds := mutantSeeds
	if cfg.seeds > 0 {
		seeds = cfg.seeds
	}
	caught := 0
	for _, m := range list {
		dir := filepath.Join(root, m.name)
		overlay, err := plant(lib, filepath.Join(dir, "planted"), plantedEdits[m.name])
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: mutant %s: %v\n", m.name, err)
			return 1
		}
		logf("mutant %s: %s; building the driver, provider, gateway and CLI with -tags %s -overlay %s", m.name, m.what, tagFailpoints, overlay)
		if err := buildWith(ctx, dir, tagFailpoints, overlay, pkgProvider, pkgGateway, pkgCLI, pkgChaos); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
		by, tried := "", 0
		for tried < seeds && by == "" && ctx.Err() == nil {
			tried++
			seed := randomSeed()
			if cfg.seeded {
				seed = cfg.seed
			}
			logPath := filepath.Join(dir, fmt.Sprintf("seed-%d.log", seed))
			out, err := runMutantSeed(ctx, dir, m, seed, cfg, logPath)
			got := parseViolated(out)
			by = m.caughtBy(got)
			var all []string
			for c, n := range got {
				all = append(all, fmt.Sprintf("%s=%d", c, n))
			}
			slices.Sort(all)
			logf("mutant %s seed %d: violations %s; meant for it: %v (caught by %q)%s; log %s",
				m.name, seed, strings.Join(all, " "), m.by, by, errNote(err), logPath)
		}
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "chaos: interrupted; logs in %s\n", root)
			return 130
		}
		yes := "no"
		if by != "" {
			yes = "yes"
			caught++
		} else {
			by = "-"
		}
		fmt.Printf("MUTANT name=%s caught=%s seeds=%d by=%s\n", m.name, yes, tried, by)
	}
	fmt.Printf("RESULT mode=mutants planted=%d caught=%d\n", len(list), caught)
	logf("mutation mode took %.0fs", time.Since(begin).Seconds())
	if caught < len(list) {
		fmt.Fprintf(os.Stderr, "chaos: a planted bug was not caught; binaries, edited files and logs in %s\n", root)
		return 1
	}
	if !cfg.keep {
		_ = os.RemoveAll(root)
	}
	return 0
}

// libraryDir is the directory of the library's module as this module
// builds it (the examples module replaces it with ../).
func libraryDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, goCmd(), "list", "-m", "-f", "{{.Dir}}", modLibrary).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", modLibrary, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: no directory", modLibrary)
	}
	return dir, nil
}

// plant applies edits to copies of the library's files (lib is its
// module's directory): each edited file is written under dir, and the
// returned overlay file maps the library's file to it, for go build
// -overlay. The library's files are left as they are. An edit whose old
// text is not found exactly once, or that adds a file already there,
// fails: a planted bug that no longer applies is an error, never a
// mutant that silently builds the library unchanged.
func plant(lib, dir string, edits []edit) (overlay string, err error) {
	if len(edits) == 0 {
		return "", errors.New("no edits to plant")
	}
	text := map[string]string{} // edited text by file, in edits' order
	var order []string
	for _, e := range edits {
		src := filepath.Join(lib, filepath.FromSlash(e.file))
		cur, seen := text[e.file]
		if !seen {
			b, err := os.ReadFile(src)
			switch {
			case e.old == "" && err == nil:
				return "", fmt.Errorf("%s: the edit adds it, but it exists", e.file)
			case e.old == "" && errors.Is(err, fs.ErrNotExist):
			case err != nil:
				return "", err
			}
			cur = string(b)
			order = append(order, e.file)
		}
		if e.old == "" {
			if cur != "" {
				return "", fmt.Errorf("%s: the edit adds it, but an earlier edit wrote it", e.file)
			}
			text[e.file] = e.new
			continue
		}
		if n := strings.Count(cur, e.old); n != 1 {
			return "", fmt.Errorf("%s: the text to replace is found %d times, want once (has the library changed?):\n%s", e.file, n, e.old)
		}
		text[e.file] = strings.Replace(cur, e.old, e.new, 1)
	}
	replace := map[string]string{}
	for _, f := range order {
		dst := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, []byte(text[f]), 0o644); err != nil {
			return "", err
		}
		replace[filepath.Join(lib, filepath.FromSlash(f))] = dst
	}
	b, err := json.MarshalIndent(struct{ Replace map[string]string }{replace}, "", "\t")
	if err != nil {
		return "", err
	}
	overlay = filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}

func errNote(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

// runMutantSeed runs one seed of the robustness mode in the mutant's own
// driver, its stderr to logPath, and returns its stdout.
func runMutantSeed(ctx context.Context, dir string, m mutant, seed int64, cfg config, logPath string) ([]byte, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	args := []string{"-bindir", dir, "-seed", strconv.FormatInt(seed, 10), "-rounds", strconv.Itoa(mutantRounds), "-bias", m.name,
		"-transport", strings.Join(cfg.transports, ",")}
	if cfg.zkTLS {
		args = append(args, "-zk-tls") // each mutant caught over TLS too
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "chaos"), args...)
	cmd.Stderr = f
	// The seed's robustness root (kept: a caught mutant's seed fails) goes
	// under the mutant's directory, which the mode removes when every
	// mutant is caught; in the system's TMPDIR, each stayed behind.
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.Output()
	_, _ = f.Write(out)
	if _, ok := err.(*exec.ExitError); ok {
		err = nil // a seed with violations exits 1: that is the point
	}
	return out, err
}
