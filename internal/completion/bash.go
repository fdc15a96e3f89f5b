package completion

import (
	"fmt"
	"strings"
)

// bash writes the bash script. It splits the line itself (COMP_LINE up to the cursor) rather
// than reading COMP_WORDS, which bash splits at every ':' of COMP_WORDBREAKS: a MAC would be
// eleven words there.
func bash(p Program) string {
	fn := p.function()
	var b strings.Builder
	fmt.Fprintf(&b, `# bash completion for %[1]s. Load it in a shell:  source <(%[1]s completion bash)
# or for every shell:  %[1]s completion bash > /etc/bash_completion.d/%[1]s
%[2]s() {
  local line=${COMP_LINE:0:COMP_POINT}
  local -a words=()
  read -ra words <<< "$line"
  if [[ ${#words[@]} -eq 0 || $line == *[[:space:]] ]]; then words+=(""); fi
  local cword=$((${#words[@]} - 1))
  local cur=${words[cword]} prev=${words[cword-1]}
  COMPREPLY=()
  if ((cword == 1)); then
    %[2]s_values 'words:%[3]s'
    return
  fi
  local cmd=${words[1]} i w skip=
  local -a fwd=() args=()
  for ((i = 2; i < cword; i++)); do
    w=${words[i]}
    if [[ -n $skip ]]; then skip=; continue; fi
    case $w in
      %[4]s) fwd+=("$w" "${words[i+1]}") ;;
    esac
    case $cmd:$w in
`, p.Name, fn, p.commandNames(), p.forwardPatterns())
	for _, c := range p.Commands {
		if vf := c.valueFlags(); len(vf) > 0 {
			fmt.Fprintf(&b, "      %s) skip=1 ;;\n", strings.Join(vf, "|"))
		}
	}
	fmt.Fprintf(&b, `      *:-*) ;;
      *) args+=("$w") ;;
    esac
  done
  case $cmd:$prev in
`)
	p.valueCases(func(pattern string, v Values) {
		fmt.Fprintf(&b, "    %s) %s_values '%s'; return ;;\n", pattern, fn, v)
	})
	fmt.Fprintf(&b, "  esac\n  if [[ $cur == -* ]]; then\n    case $cmd in\n")
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "      %s) %s_values 'words:%s' ;;\n", c.Name, fn, c.flagWords())
	}
	fmt.Fprintf(&b, "    esac\n    return\n  fi\n  case $cmd:${#args[@]} in\n")
	p.argCases(func(pattern string, v Values) {
		fmt.Fprintf(&b, "    %s) %s_values '%s' ;;\n", pattern, fn, v)
	})
	fmt.Fprintf(&b, `  esac
}

# %[1]s_values VALUES: COMPREPLY for the word at the cursor ($cur; $words, $fwd and $args of
# the caller for the questions to %[2]s).
%[1]s_values() {
  local v=$1 reply=
  case $v in
    files) compopt -o filenames 2>/dev/null; reply=$(compgen -f -- "$cur") ;;
    dirs) compopt -o filenames 2>/dev/null; reply=$(compgen -d -- "$cur") ;;
    interfaces) reply=$(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur") ;;
    glob:*) compopt -o filenames 2>/dev/null; reply=$(compgen -d -- "$cur"; compgen -f -X "!${v#glob:}" -- "$cur") ;;
    words:*) reply=$(compgen -W "${v#words:}" -- "$cur") ;;
    ask:*) reply=$(compgen -W "$("${words[0]}" __complete "${fwd[@]}" "${v#ask:}" -- "${args[@]}" 2>/dev/null)" -- "$cur") ;;
  esac
  local IFS=$'\n'
  COMPREPLY=($reply)
  # bash replaces only what follows the word's last ':' (a MAC's last byte).
  if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
    local colon=${cur%%"${cur##*:}"}
    COMPREPLY=("${COMPREPLY[@]#"$colon"}")
  fi
}

complete -F %[1]s %[2]s
`, fn, p.Name)
	return b.String()
}
