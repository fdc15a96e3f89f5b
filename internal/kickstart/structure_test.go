package kickstart

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// rocky9Commands are the Rocky Linux 9 (RHEL 9 pykickstart) commands the
// templates use, each with the options it may take here. A command missing
// from this list, or an option missing from its entry, is a mistake until
// checked against the RHEL 9 kickstart reference and added.
var rocky9Commands = map[string][]string{
	"text":       {},
	"lang":       {},
	"keyboard":   {"--vckeymap"},
	"timezone":   {"--utc"},
	"firstboot":  {"--disable"},
	"selinux":    {"--disabled", "--enforcing", "--permissive"},
	"reboot":     {},
	"zerombr":    {},
	"bootloader": {"--append"},
	"url":        {"--url"},
	"repo":       {"--name", "--baseurl"},
	"module":     {"--name", "--stream"},
	"group":      {"--name", "--gid"},
	"user":       {"--name", "--uid", "--gid", "--homedir", "--shell", "--gecos", "--lock"},
	"services":   {"--enabled", "--disabled"},
	"network": {"--bootproto", "--device", "--ip", "--netmask", "--gateway", "--nameserver", "--hostname",
		"--noipv6", "--activate", "--onboot"},
	"rootpw": {"--lock"},
}

// repeatable commands may appear more than once; kickstart keeps only the
// last of any other.
var repeatable = []string{"repo", "module", "group", "user", "network"}

// sections are the section headers the templates use, with their options.
var sections = map[string][]string{
	"%pre":      {"--erroronfail", "--log"},
	"%packages": {"--nocore", "--excludeWeakdeps"},
	"%post":     {"--erroronfail", "--log"},
}

// checkStructure reads ks as pykickstart does: outside sections every line
// is blank, a comment, %include or a known command with known options
// (split as shlex would); a section opens with a known header and closes
// with %end, and inside it no line starts with % (which would open another
// section or be read as one).
func checkStructure(ks string) error {
	if !strings.HasSuffix(ks, "\n") {
		return fmt.Errorf("no final newline")
	}
	section, seen := "", map[string]bool{}
	for i, line := range strings.Split(strings.TrimSuffix(ks, "\n"), "\n") {
		var err error
		if section == "" {
			section, err = commandLine(line, seen)
		} else if t := strings.TrimLeft(line, " \t"); t == "%end" {
			section = ""
		} else if strings.HasPrefix(t, "%") {
			err = fmt.Errorf("%q inside %s", t, section)
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	if section != "" {
		return fmt.Errorf("%s not closed with %%end", section)
	}
	return nil
}

// commandLine checks one line outside sections and returns the section it opens, if any.
func commandLine(line string, seen map[string]bool) (string, error) {
	if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimLeft(line, " \t"), "#") {
		return "", nil
	}
	args, err := shlexSplit(line)
	if err != nil {
		return "", err
	}
	name, opts := args[0], args[1:]
	known, isSection := sections[name]
	switch {
	case name == "%include":
		return "", nil
	case isSection:
		return name, checkOptions(name, opts, known)
	case strings.HasPrefix(name, "%"):
		return "", fmt.Errorf("unknown section %s", name)
	}
	known, ok := rocky9Commands[name]
	if !ok {
		return "", fmt.Errorf("unknown command %q", name)
	}
	if seen[name] && !slices.Contains(repeatable, name) {
		return "", fmt.Errorf("%s given twice: kickstart keeps only the last", name)
	}
	seen[name] = true
	if name == "lang" || name == "timezone" {
		opts = opts[1:] // their one positional argument
	}
	return "", checkOptions(name, opts, known)
}

func checkOptions(name string, opts, known []string) error {
	for _, o := range opts {
		key, _, _ := strings.Cut(o, "=")
		if !slices.Contains(known, key) {
			return fmt.Errorf("%s: unknown option %q", name, o)
		}
	}
	return nil
}

// shlexSplit is Python's shlex.split(line, comments=True) for what the
// templates write: blanks separate words, double and single quotes group
// (the checks keep backslashes out), # outside quotes starts a comment.
func shlexSplit(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == '\\':
			return nil, fmt.Errorf("backslash outside quotes")
		case r == '#' && !inWord:
			return append(words, flush(&word, inWord)...), nil
		case r == ' ' || r == '\t':
			words, inWord = append(words, flush(&word, inWord)...), false
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c", quote)
	}
	return append(words, flush(&word, inWord)...), nil
}

func flush(b *strings.Builder, inWord bool) []string {
	if !inWord {
		return nil
	}
	s := b.String()
	b.Reset()
	return []string{s}
}

// TestCheckStructure keeps the checker honest: each of these is a mistake.
func TestCheckStructure(t *testing.T) {
	tests := []struct{ name, ks string }{
		{"unknown command", "text\nautopartt\n"},
		{"unknown option", "user --name=x --password=y\n"},
		{"twice", "bootloader\nbootloader --append=\"a\"\n"},
		{"unclosed section", "%post\ntrue\n"},
		{"nested section", "%post\n%packages\n%end\n%end\n"},
		{"unknown section", "%postt\n%end\n"},
		{"unclosed quote", "user --name=x --gecos=\"a\n"},
		{"no final newline", "text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if checkStructure(tt.ks) == nil {
				t.Errorf("accepted %q", tt.ks)
			}
		})
	}
	if err := checkStructure("# c\ntext\n%post --log=/x\n  # %end not\nfoo %end\n%end\nreboot\n"); err != nil {
		t.Errorf("refused a good kickstart: %v", err)
	}
}
