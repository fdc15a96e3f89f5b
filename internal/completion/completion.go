// Package completion writes bash and zsh completion scripts for a program from a table of its
// commands: their flags, the values each flag takes, and their arguments. Values only the
// program knows (the running bootd's node names, image versions on disk) are asked of the
// program itself as the user presses Tab: `PROG __complete [forwarded flags] KIND -- [arguments
// so far]`, one value a line, nothing when it cannot tell.
package completion

import (
	"fmt"
	"slices"
	"strings"
)

// Values says how to complete a word: a kind of file, fixed words, or a question to the program.
type Values string

// The kinds of values the scripts complete by themselves.
const (
	None       Values = ""           // a boolean flag: no value
	Any        Values = "any"        // a value the script cannot guess (a version to make)
	Files      Values = "files"      // any file
	Dirs       Values = "dirs"       // directories
	Interfaces Values = "interfaces" // network interfaces of this machine
)

// Words completes one of ws.
func Words(ws ...string) Values { return Values("words:" + strings.Join(ws, " ")) }

// Glob completes files matching pattern (and directories, to reach them).
func Glob(pattern string) Values { return Values("glob:" + pattern) }

// Ask completes what `PROG __complete kind` prints.
func Ask(kind string) Values { return Values("ask:" + kind) }

// Flag is one flag of a command; Values is None for a boolean.
type Flag struct {
	Name   string // without dashes
	Values Values
}

// Command is one command of the program.
type Command struct {
	Name  string
	Flags []Flag
	// Args complete the positional arguments in order; the last one repeats (NAME...).
	Args []Values
}

// Program is what a script completes.
type Program struct {
	Name     string
	Commands []Command
	// Forward are the flags whose values go with every question to the program (where the
	// daemon's socket is, where the images are).
	Forward []string
}

// function is the completion function's name: _bootd.
func (p Program) function() string { return "_" + strings.ReplaceAll(p.Name, "-", "_") }

func (p Program) commandNames() string {
	var names []string
	for _, c := range p.Commands {
		names = append(names, c.Name)
	}
	return strings.Join(names, " ")
}

// valueFlags are the flags of c that take a value, as "cmd:--flag" case patterns.
func (c Command) valueFlags() []string {
	var out []string
	for _, f := range c.Flags {
		if f.Values != None {
			out = append(out, c.Name+":--"+f.Name, c.Name+":-"+f.Name)
		}
	}
	return out
}

func (c Command) flagWords() string {
	var out []string
	for _, f := range c.Flags {
		out = append(out, "--"+f.Name)
	}
	return strings.Join(out, " ")
}

// check refuses a table the scripts cannot carry: names with shell metacharacters.
func (p Program) check() error {
	ok := func(s string) bool {
		return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == ""
	}
	if !ok(p.Name) {
		return fmt.Errorf("completion: program name %q", p.Name)
	}
	for _, c := range p.Commands {
		if !ok(c.Name) {
			return fmt.Errorf("completion: command name %q", c.Name)
		}
		for _, f := range c.Flags {
			if !ok(f.Name) {
				return fmt.Errorf("completion: %s: flag name %q", c.Name, f.Name)
			}
		}
	}
	for _, f := range p.Forward {
		if !ok(f) {
			return fmt.Errorf("completion: forwarded flag %q", f)
		}
	}
	return nil
}

// forwardPatterns are the case patterns of the forwarded flags: --state-dir|-state-dir.
func (p Program) forwardPatterns() string {
	var out []string
	for _, f := range p.Forward {
		out = append(out, "--"+f, "-"+f)
	}
	if len(out) == 0 {
		return "--no-forwarded-flag"
	}
	return strings.Join(out, "|")
}

// valueCases calls emit for each (command, flag) that takes a value.
func (p Program) valueCases(emit func(pattern string, v Values)) {
	for _, c := range p.Commands {
		for _, f := range c.Flags {
			if f.Values != None {
				emit(c.Name+":--"+f.Name+"|"+c.Name+":-"+f.Name, f.Values)
			}
		}
	}
}

// argCases calls emit for each (command, argument index) pattern; the last argument's
// pattern matches every later index.
func (p Program) argCases(emit func(pattern string, v Values)) {
	for _, c := range p.Commands {
		for i, v := range c.Args {
			pattern := fmt.Sprintf("%s:%d", c.Name, i)
			if i == len(c.Args)-1 {
				pattern = c.Name + ":*"
			}
			emit(pattern, v)
		}
	}
}

// Script returns the completion script for shell, "bash" or "zsh".
func Script(p Program, shell string) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	switch shell {
	case "bash":
		return bash(p), nil
	case "zsh":
		return zsh(p), nil
	}
	return "", fmt.Errorf("no completion for shell %q (want bash or zsh)", shell)
}

// Shells are the shells Script writes for.
var Shells = []string{"bash", "zsh"}

// IsShell reports whether Script writes for shell.
func IsShell(shell string) bool { return slices.Contains(Shells, shell) }
