package kickstart

import (
	"fmt"
	"strings"
)

// safeBytes are the bytes that need no quoting, for kickstart (shlex) and
// for the shell alike.
const safeBytes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,=@+-"

// checkText refuses control characters: a line break would end a kickstart
// line or start a line (%end) that kickstart reads as a section header.
func checkText(s string) error {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q has a control character", s)
		}
	}
	return nil
}

// checkArg wants a value that kickstart's shlex can take inside double
// quotes: no control characters, no double quote, no backslash.
func checkArg(s string) error {
	if err := checkText(s); err != nil {
		return err
	}
	if strings.ContainsAny(s, `"\`) {
		return fmt.Errorf("%q has a double quote or a backslash, which a kickstart line cannot carry", s)
	}
	return nil
}

// checkWord wants one word of a list joined by blanks (kernel arguments).
func checkWord(s string) error {
	if err := checkArg(s); err != nil {
		return err
	}
	if s == "" || strings.ContainsAny(s, " ") {
		return fmt.Errorf("%q is not one word", s)
	}
	return nil
}

// checkItem wants one item of a list joined by commas and left unquoted
// (services): a word of safe bytes only.
func checkItem(s string) error {
	if s == "" || strings.Trim(s, safeBytes) != "" || strings.Contains(s, ",") {
		return fmt.Errorf("%q cannot be an item of a kickstart list", s)
	}
	return nil
}

// ksQuote quotes a value checkArg accepted for a kickstart option.
func ksQuote(s string) string {
	if s != "" && strings.Trim(s, safeBytes) == "" {
		return s
	}
	return `"` + s + `"`
}

// shQuote quotes s for the shell: any bytes but NUL survive single quotes.
func shQuote(s string) string {
	if s != "" && strings.Trim(s, safeBytes) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func ksList(items []string) string { return strings.Join(items, ",") }

func shList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = shQuote(s)
	}
	return strings.Join(q, " ")
}
