// Package hostlist reads host lists as Slurm and pdsh write them: "master,c[1-4,7]" is master,
// c1, c2, c3, c4 and c7. bootd's power commands take them from the admin and from Slurm's
// SuspendProgram and ResumeProgram, which pass their nodes in this form.
package hostlist

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds one list's expansion: c[1-999999999] must be an error, not a billion names.
const MaxHosts = 100000

// Expand returns the names of lists, each a comma-separated host list, in order and without
// repeats. A bracket holds numbers and ranges ("c[1-3,7]"); leading zeros are kept as Slurm
// keeps them ("n[01-03]" is n01, n02, n03). An error names the item that is wrong.
func Expand(lists ...string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, list := range lists {
		items, err := split(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			hosts, err := expandItem(item)
			if err != nil {
				return nil, fmt.Errorf("host list %q: %q: %w", list, item, err)
			}
			for _, h := range hosts {
				if !seen[h] {
					seen[h] = true
					names = append(names, h)
				}
			}
			if len(names) > MaxHosts {
				return nil, fmt.Errorf("host list %q: more than %d hosts", list, MaxHosts)
			}
		}
	}
	return names, nil
}

// split cuts list at the commas outside brackets.
func split(list string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i, r := range list {
		switch r {
		case '[':
			depth++
			if depth > 1 {
				return nil, fmt.Errorf("host list %q: brackets inside brackets", list)
			}
		case ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("host list %q: ']' without '['", list)
			}
		case ',':
			if depth == 0 {
				items = append(items, list[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("host list %q: '[' without ']'", list)
	}
	items = append(items, list[start:])
	for _, it := range items {
		if it == "" {
			return nil, fmt.Errorf("host list %q: an empty name", list)
		}
	}
	return items, nil
}

// expandItem expands one name with at most one bracket: "c[1-3]x" is c1x, c2x, c3x.
func expandItem(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		return []string{item}, checkName(item)
	}
	end := strings.IndexByte(item, ']')
	prefix, body, suffix := item[:open], item[open+1:end], item[end+1:]
	if strings.ContainsAny(suffix, "[]") {
		return nil, fmt.Errorf("one bracket per name")
	}
	if body == "" {
		return nil, fmt.Errorf("an empty bracket")
	}
	var hosts []string
	for _, part := range strings.Split(body, ",") {
		nums, err := expandRange(part)
		if err != nil {
			return nil, err
		}
		for _, n := range nums {
			h := prefix + n + suffix
			if err := checkName(h); err != nil {
				return nil, err
			}
			hosts = append(hosts, h)
		}
		if len(hosts) > MaxHosts {
			return nil, fmt.Errorf("more than %d hosts", MaxHosts)
		}
	}
	return hosts, nil
}

// expandRange expands "7" or "1-4" (or "01-04", zero-padded to the first number's width).
func expandRange(part string) ([]string, error) {
	lo, hi, isRange := strings.Cut(part, "-")
	from, err := number(lo)
	if err != nil {
		return nil, err
	}
	if !isRange {
		return []string{lo}, nil
	}
	to, err := number(hi)
	if err != nil {
		return nil, err
	}
	if to < from {
		return nil, fmt.Errorf("range %s runs backwards", part)
	}
	if to-from >= MaxHosts {
		return nil, fmt.Errorf("range %s holds more than %d hosts", part, MaxHosts)
	}
	width := 0
	if len(lo) > 1 && lo[0] == '0' {
		width = len(lo)
	}
	out := make([]string, 0, to-from+1)
	for n := from; n <= to; n++ {
		out = append(out, fmt.Sprintf("%0*d", width, n))
	}
	return out, nil
}

func number(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" || len(s) > 9 {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return strconv.Atoi(s)
}

// checkName wants a host name's characters: lower-case letters, digits, '-', '_' and '.'.
func checkName(h string) error {
	if h == "" {
		return fmt.Errorf("an empty name")
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q is not a host name (lower-case letters, digits, '-', '_', '.')", h)
		}
	}
	return nil
}
