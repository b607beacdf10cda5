package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

func init() {
	commands["ui"] = command{summary: "the approval UI: ui url prints its address with the login token", run: cmdUI}
}

// uiTokenFile holds the UI's login token, in the data directory.
const uiTokenFile = "ui.token"

// uiToken returns the UI's login token, creating it (32 random bytes,
// readable by the owner only) on first use.
func uiToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, uiTokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 64 {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	tok := hex.EncodeToString(buf)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // another process made it first
		b, rerr := os.ReadFile(path)
		if rerr != nil {
			return "", fmt.Errorf("ui token: %w", rerr)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(tok + "\n"); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	return tok, nil
}

// uiURL is the address a browser opens: the login route with the token,
// at the public URL when one is configured.
func uiURL(publicURL, listen, token string) string {
	return uiBase(publicURL, listen) + "/login?token=" + token
}

// uiBase is the UI's address: the public URL when one is configured
// (browsers reach the UI through what stands in front of guard), else
// the address it listens on.
func uiBase(publicURL, listen string) string {
	if publicURL != "" {
		return publicURL
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func cmdUI(ctx context.Context, a *app, args []string) int {
	if len(args) == 0 || args[0] != "url" {
		fmt.Fprintln(a.stderr, "usage: guard ui url")
		return exitUsage
	}
	fs := a.flagSet("ui url")
	cf := addCommonFlags(fs)
	if status, ok := a.parseFlags(fs, args[1:]); !ok {
		return status
	}
	st, status, ok := a.settingsOrExit(cf)
	if !ok {
		return status
	}
	tok, err := st.uiToken()
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(a.stdout, uiURL(st.Config.PublicURL, st.Config.UI.Listen, tok))
	return exitOK
}
