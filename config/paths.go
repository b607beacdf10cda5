package config

import (
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// Paths returns the default configuration file (when it exists) and
// database path: guard.yaml and guard.db in the directories of Dirs.
func Paths(getenv func(string) string) (configPath, dbPath string) {
	cfgDir, dataDir := Dirs(getenv)
	if f := filepath.Join(cfgDir, "guard.yaml"); fileExists(f) {
		configPath = f
	}
	return configPath, filepath.Join(dataDir, "guard.db")
}

// Dirs returns guard's default configuration and data directories on
// this OS (DirsFor), the home directory being $HOME when set.
func Dirs(getenv func(string) string) (configDir, dataDir string) {
	home, _ := os.UserHomeDir()
	if h := getenv("HOME"); h != "" {
		home = h
	}
	return DirsFor(runtime.GOOS, getenv, home)
}

// DirsFor returns guard's default configuration and data directories on
// goos, from its environment and the home directory, each where that OS
// keeps a program's files:
//
//   - Linux and other Unix: $XDG_CONFIG_HOME/guard (~/.config/guard) and
//     $XDG_DATA_HOME/guard (~/.local/share/guard);
//   - macOS: ~/Library/Application Support/guard for both, unless
//     XDG_CONFIG_HOME or XDG_DATA_HOME is set (each for its own);
//   - Windows: %APPDATA%\guard and %LOCALAPPDATA%\guard (the home
//     directory's AppData\Roaming and AppData\Local when unset).
//
// It reads nothing but its arguments, so that every OS's layout can be
// tested anywhere.
func DirsFor(goos string, getenv func(string) string, home string) (configDir, dataDir string) {
	if goos == "windows" {
		cfg, data := getenv("APPDATA"), getenv("LOCALAPPDATA")
		if cfg == "" {
			cfg = windowsJoin(home, `AppData\Roaming`)
		}
		if data == "" {
			data = windowsJoin(home, `AppData\Local`)
		}
		return windowsJoin(cfg, "guard"), windowsJoin(data, "guard")
	}
	cfg, data := path.Join(home, ".config"), path.Join(home, ".local", "share")
	if goos == "darwin" {
		cfg = path.Join(home, "Library", "Application Support")
		data = cfg
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		cfg = x
	}
	if x := getenv("XDG_DATA_HOME"); x != "" {
		data = x
	}
	return path.Join(cfg, "guard"), path.Join(data, "guard")
}

// windowsJoin joins a Windows path and a name with a backslash, on any OS.
func windowsJoin(dir, name string) string {
	return strings.TrimRight(dir, `\/`) + `\` + name
}

func fileExists(f string) bool {
	st, err := os.Stat(f)
	return err == nil && !st.IsDir()
}

// ExpandHome replaces a leading "~/" (or `~\` on Windows) with the home
// directory.
func ExpandHome(p string, getenv func(string) string) string {
	if len(p) >= 2 && p[0] == '~' && (p[1] == '/' || p[1] == filepath.Separator) {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		return filepath.Join(home, p[2:])
	}
	return p
}
