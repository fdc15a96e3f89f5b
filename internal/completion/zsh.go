package completion

import (
	"fmt"
	"strings"
)

// zsh writes the zsh script: a completion function for the completion system (compinit).
func zsh(p Program) string {
	fn := p.function()
	var b strings.Builder
	fmt.Fprintf(&b, `#compdef %[1]s
# zsh completion for %[1]s. Load it in a shell (after compinit):  source <(%[1]s completion zsh)
# or install it as %[2]s in a directory of $fpath:  %[1]s completion zsh > /usr/local/share/zsh/site-functions/%[2]s
%[2]s() {
  local cur=${words[CURRENT]} prev=${words[CURRENT-1]}
  if (( CURRENT == 2 )); then
    %[2]s_values 'words:%[3]s'
    return
  fi
  local cmd=${words[2]} i w skip=
  local -a fwd args
  for (( i = 3; i < CURRENT; i++ )); do
    w=${words[i]}
    if [[ -n $skip ]]; then skip=; continue; fi
    case $w in
      (%[4]s) fwd+=("$w" "${words[i+1]}") ;;
    esac
    case $cmd:$w in
`, p.Name, fn, p.commandNames(), p.forwardPatterns())
	for _, c := range p.Commands {
		if vf := c.valueFlags(); len(vf) > 0 {
			fmt.Fprintf(&b, "      (%s) skip=1 ;;\n", strings.Join(vf, "|"))
		}
	}
	fmt.Fprintf(&b, `      (*:-*) ;;
      (*) args+=("$w") ;;
    esac
  done
  case $cmd:$prev in
`)
	p.valueCases(func(pattern string, v Values) {
		fmt.Fprintf(&b, "    (%s) %s_values '%s'; return ;;\n", pattern, fn, v)
	})
	fmt.Fprintf(&b, "  esac\n  if [[ $cur == -* ]]; then\n    case $cmd in\n")
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "      (%s) %s_values 'words:%s' ;;\n", c.Name, fn, c.flagWords())
	}
	fmt.Fprintf(&b, "    esac\n    return\n  fi\n  case $cmd:${#args} in\n")
	p.argCases(func(pattern string, v Values) {
		fmt.Fprintf(&b, "    (%s) %s_values '%s' ;;\n", pattern, fn, v)
	})
	fmt.Fprintf(&b, `  esac
}

# %[1]s_values VALUES: candidates for the word at the cursor ($words, $fwd and $args of the
# caller for the questions to %[2]s).
%[1]s_values() {
  local v=$1
  case $v in
    (files) _files ;;
    (dirs) _files -/ ;;
    (interfaces) compadd -- ${(f)"$(ls /sys/class/net 2>/dev/null)"} ;;
    (glob:*) _files -g "${v#glob:}" ;;
    (words:*) compadd -- ${=${v#words:}} ;;
    (ask:*) compadd -- ${(f)"$(${words[1]} __complete $fwd ${v#ask:} -- $args 2>/dev/null)"} ;;
  esac
}

# Autoloaded from $fpath, this file is %[1]s's body: complete. Sourced, register it.
if [[ ${funcstack[1]} == %[1]s ]]; then
  %[1]s "$@"
elif (( $+functions[compdef] )); then
  compdef %[1]s %[2]s
fi
`, fn, p.Name)
	return b.String()
}
