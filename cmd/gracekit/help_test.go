package main

import (
	"bytes"
	"context"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// These tests hold the help a user reads (gracekit help, gracekit <command>
// -h, docs/CLI.md and the README beside this file) to the flags each
// command defines. They are pure: no command here gets far enough to dial.

// commandFlagSets builds each command's FlagSet as its run function does.
var commandFlagSets = map[string]func() *flag.FlagSet{
	"ls":      func() *flag.FlagSet { fs, _ := newLsFlags(io.Discard); return fs },
	"watch":   func() *flag.FlagSet { fs, _ := newWatchFlags(io.Discard); return fs },
	"check":   func() *flag.FlagSet { fs, _ := newCheckFlags(io.Discard); return fs },
	"drain":   func() *flag.FlagSet { fs, _ := newDrainFlags(false, io.Discard); return fs },
	"undrain": func() *flag.FlagSet { fs, _ := newDrainFlags(true, io.Discard); return fs },
}

// helpAliases are run's spellings of help, which are no commands.
var helpAliases = []string{"help", "-h", "-help", "--help"}

func flagNames(fs *flag.FlagSet) map[string]bool {
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

func commonFlagNames() map[string]bool {
	fs := flag.NewFlagSet("common", flag.ContinueOnError)
	addCommonFlags(fs)
	return flagNames(fs)
}

// ownFlags are a command's flags beyond the common ones.
func ownFlags(cmd string) map[string]bool {
	own := flagNames(commandFlagSets[cmd]())
	for n := range commonFlagNames() {
		delete(own, n)
	}
	return own
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// flagMention is a flag as prose names it: a '-' that starts a word, then
// a lowercase name ("-min-up", not "data-less" or "->"). The word before
// it, when it is a command ("drain -delete"), says whose flag it is.
var flagMention = regexp.MustCompile(`(?:(\w+) |^|[\s("'\x60\[,])-([a-z][a-z0-9-]*)`)

type mention struct{ cmd, flag string }

func mentions(text string) []mention {
	var ms []mention
	for _, m := range flagMention.FindAllStringSubmatch(text, -1) {
		cmd := m[1]
		if commandFlagSets[cmd] == nil {
			cmd = ""
		}
		ms = append(ms, mention{cmd, m[2]})
	}
	return ms
}

// dispatched are the commands run's switch on args[0] knows, read from
// main.go, so that a command added there and not here fails the test.
func dispatched(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "run" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				lit, ok := e.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				s, _ := strconv.Unquote(lit.Value)
				if !slices.Contains(helpAliases, s) {
					cmds = append(cmds, s)
				}
			}
			return true
		})
		return false
	})
	sort.Strings(cmds)
	return cmds
}

func TestHelpCoversEveryCommand(t *testing.T) {
	t.Parallel()
	got := dispatched(t)
	if want := sortedKeys(commandFlagSets); !slices.Equal(got, want) {
		t.Fatalf("run dispatches %v; commandFlagSets in help_test.go has %v: keep the two in step", got, want)
	}
}

// helpEntry is one flag's entry in gracekit help: its first line and the
// lines under it, indented deeper.
type helpEntry struct {
	cmd  string // "" for the common flags
	text string
}

// topHelp reads gracekit help as a user sees it, and splits its command
// and common-flag sections into the command each line is under and the
// flag entries.
func topHelp(t *testing.T) (help string, blocks map[string]string, entries map[string][]helpEntry) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("gracekit help: exit %d, stderr %q", code, stderr.String())
	}
	help = stdout.String()
	blocks = map[string]string{}
	entries = map[string][]helpEntry{}
	cmdLine := regexp.MustCompile(`^  ([a-z]+) `)
	ownFlag := regexp.MustCompile(`^    -([a-z][a-z0-9-]*)`)
	commonFlag := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	section, cmd, flagName := "", "", ""
	for _, line := range strings.Split(help, "\n") {
		switch {
		case line == "":
			section, cmd, flagName = "", "", ""
			continue
		case strings.HasPrefix(line, "commands"):
			section = "commands"
			continue
		case strings.HasPrefix(line, "common flags"):
			section = "common"
			continue
		}
		switch section {
		case "commands":
			if m := cmdLine.FindStringSubmatch(line); m != nil && commandFlagSets[m[1]] != nil {
				cmd, flagName = m[1], ""
			} else if m := ownFlag.FindStringSubmatch(line); m != nil {
				flagName = m[1]
				entries[flagName] = append(entries[flagName], helpEntry{cmd: cmd})
			} else if cmd == "" {
				t.Fatalf("gracekit help: line %q in the commands section is under no command", line)
			}
			blocks[cmd] += line + "\n"
		case "common":
			if m := commonFlag.FindStringSubmatch(line); m != nil {
				flagName = m[1]
				entries[flagName] = append(entries[flagName], helpEntry{})
			} else if flagName == "" {
				t.Fatalf("gracekit help: line %q in the common flags section is under no flag", line)
			}
		default:
			continue
		}
		if flagName != "" {
			es := entries[flagName]
			es[len(es)-1].text += line + "\n"
		}
	}
	if len(blocks) == 0 || len(entries) == 0 {
		t.Fatalf("gracekit help: no commands or flags sections found in\n%s", help)
	}
	return help, blocks, entries
}

// TestHelpListsEveryFlag: gracekit help has one entry per flag, under the
// command that defines it, or among the common flags for those every
// command takes, and no entry for a flag that does not exist.
func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	_, blocks, entries := topHelp(t)
	common := commonFlagNames()
	defs := map[string]*flag.Flag{}
	for cmd, build := range commandFlagSets {
		if blocks[cmd] == "" {
			t.Errorf("gracekit help lists no command %q", cmd)
		}
		fs := build()
		fs.VisitAll(func(f *flag.Flag) { defs[f.Name] = f })
		for name := range flagNames(fs) {
			want := cmd
			if common[name] {
				want = ""
			}
			if !slices.ContainsFunc(entries[name], func(e helpEntry) bool { return e.cmd == want }) {
				where := "under " + cmd
				if want == "" {
					where = "among the common flags"
				}
				t.Errorf("gracekit help: %s's flag -%s is not listed %s", cmd, name, where)
			}
		}
	}
	for name, es := range entries {
		for _, e := range es {
			switch {
			case e.cmd == "" && !common[name]:
				t.Errorf("gracekit help lists -%s among the common flags; the common flags are %v", name, sortedKeys(common))
			case e.cmd != "" && !ownFlags(e.cmd)[name]:
				t.Errorf("gracekit help lists -%s under %s, which defines no such flag of its own (its own: %v)", name, e.cmd, sortedKeys(ownFlags(e.cmd)))
			}
			// A default the flag package would print, the help prints too.
			if f := defs[name]; f != nil && f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" &&
				(!strings.Contains(e.text, "default") || !strings.Contains(e.text, f.DefValue)) {
				t.Errorf("gracekit help: the entry of -%s does not give its default %s:\n%s", name, f.DefValue, e.text)
			}
		}
		if len(es) > 1 {
			t.Errorf("gracekit help lists -%s %d times", name, len(es))
		}
	}
	if es := entries["ignore"]; len(es) == 1 {
		for _, k := range findingKinds {
			if !strings.Contains(es[0].text, k) {
				t.Errorf("gracekit help: -ignore does not name the finding kind %s", k)
			}
		}
	}
}

// checkMentions reports a flag that text names and that does not exist:
// one qualified by a command ("drain -delete") must be that command's,
// any other one of cmds'.
func checkMentions(t *testing.T, where, text string, cmds ...string) {
	t.Helper()
	for _, m := range mentions(text) {
		if m.flag == "h" || m.flag == "help" { // the flag package's own
			continue
		}
		owners := cmds
		if m.cmd != "" {
			owners = []string{m.cmd}
		}
		if !slices.ContainsFunc(owners, func(c string) bool { return flagNames(commandFlagSets[c]())[m.flag] }) {
			t.Errorf("%s mentions -%s, which %v does not define", where, m.flag, owners)
		}
	}
}

// TestHelpMentionsNoFlagThatDoesNotExist: every -flag in gracekit help's
// prose exists, as the flag of the command whose entry or line names it.
func TestHelpMentionsNoFlagThatDoesNotExist(t *testing.T) {
	t.Parallel()
	help, blocks, _ := topHelp(t)
	all := sortedKeys(commandFlagSets)
	for cmd, block := range blocks {
		checkMentions(t, "gracekit help, under "+cmd+",", block, cmd)
	}
	checkMentions(t, "gracekit help", help, all...)
}

// TestCommandHelpListsItsFlags: gracekit <command> -h exits 0 and lists
// exactly the flags the command defines, and its prose names no other.
func TestCommandHelpListsItsFlags(t *testing.T) {
	t.Parallel()
	listed := regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)
	for cmd, build := range commandFlagSets {
		t.Run(cmd, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{cmd, "-h"}, &stdout, &stderr); code != exitOK {
				t.Fatalf("gracekit %s -h: exit %d, stderr %q", cmd, code, stderr.String())
			}
			out := stderr.String()
			if !strings.HasPrefix(out, "usage: gracekit "+cmd+" ") {
				t.Fatalf("gracekit %s -h starts %q", cmd, out)
			}
			got := map[string]bool{}
			for _, m := range listed.FindAllStringSubmatch(out, -1) {
				got[m[1]] = true
			}
			if want := flagNames(build()); !slices.Equal(sortedKeys(got), sortedKeys(want)) {
				t.Errorf("gracekit %s -h lists %v; the command defines %v", cmd, sortedKeys(got), sortedKeys(want))
			}
			// The prose before the flag list.
			prose := out
			if i := strings.Index(out, "\n  -"); i >= 0 {
				prose = out[:i]
			}
			checkMentions(t, "gracekit "+cmd+" -h", prose, cmd)
		})
	}
}

// TestDocsMentionEveryFlag: docs/CLI.md and the README beside this file
// name every flag of every command, and no flag that does not exist.
func TestDocsMentionEveryFlag(t *testing.T) {
	t.Parallel()
	all := sortedKeys(commandFlagSets)
	for _, doc := range []string{"../../docs/CLI.md", "README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		named := map[string]bool{}
		for _, m := range mentions(text) {
			named[m.flag] = true
		}
		owners := map[string][]string{} // flag: the commands that define it
		for _, cmd := range all {
			for name := range flagNames(commandFlagSets[cmd]()) {
				owners[name] = append(owners[name], cmd)
			}
		}
		for _, name := range sortedKeys(owners) {
			if !named[name] {
				t.Errorf("%s does not mention -%s (a flag of %v)", doc, name, owners[name])
			}
		}
		// "go test -race" names go's flags, not gracekit's.
		var prose []string
		for _, line := range strings.Split(text, "\n") {
			if !strings.Contains(line, "go test ") {
				prose = append(prose, line)
			}
		}
		checkMentions(t, doc, strings.Join(prose, "\n"), all...)
	}
}
