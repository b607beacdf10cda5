package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func init() { register(completionCommand) }

// completionCommand writes the script that completes guard's commands,
// flags and values in a shell.
func completionCommand(a *app) *cobra.Command {
	c := leaf("completion bash|zsh|fish|powershell", "print the script that completes guard's commands and flags in a shell",
		cobra.MatchAll(exactly("SHELL"), cobra.OnlyValidArgs))
	c.Long = `Print the script that completes guard's commands, flags and their values in a shell.

  bash        source <(guard completion bash)
              (for every shell: guard completion bash > /etc/bash_completion.d/guard;
              it needs the bash-completion package)
  zsh         guard completion zsh > "${fpath[1]}/_guard"   (with compinit in ~/.zshrc)
  fish        guard completion fish > ~/.config/fish/completions/guard.fish
  powershell  guard completion powershell | Out-String | Invoke-Expression
              (add that line to $PROFILE for every session)`
	c.ValidArgs = []string{"bash", "zsh", "fish", "powershell"}
	c.RunE = a.runs(func(_ context.Context, args []string) int {
		root := c.Root()
		var err error
		switch args[0] {
		case "bash":
			err = root.GenBashCompletionV2(a.stdout, true)
		case "zsh":
			err = root.GenZshCompletion(a.stdout)
		case "fish":
			err = root.GenFishCompletion(a.stdout, true)
		case "powershell":
			err = root.GenPowerShellCompletionWithDesc(a.stdout)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "guard completion: %v\n", err)
			return exitFailure
		}
		return exitOK
	})
	return c
}
