package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// protectedOn is guard's files as NewProtected finds them on goos, with
// the environment given.
func protectedOn(goos, home, dir string, vars map[string]string, paths ...string) *Protected {
	return &Protected{OS: goos, Home: home, Dir: dir, Vars: vars, Paths: paths}
}

// checks runs each text through Check as a JSON string argument and
// reports those denied otherwise than want says.
func checks(t *testing.T, p *Protected, cases map[string]bool) {
	t.Helper()
	for text, deny := range cases {
		args, _ := json.Marshal(map[string]string{"arg": text})
		if got := p.Check(args) != ""; got != deny {
			t.Errorf("%s: %s: denied=%v, want %v", p.OS, text, got, deny)
		}
	}
}

// guard's own command line, wrap, unwrap and store included, is refused
// however it is spelt: by path, quoted, with flags before the subcommand,
// and on the systems whose file names ignore case, in capitals.
func TestGuardCommandLine(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		p := protectedOn(goos, "/home/me", "/home/me", nil, "/var/lib/guard/guard.db")
		checks(t, p, map[string]bool{
			"guard wrap claude-desktop":                      true,
			"guard unwrap":                                   true,
			"/usr/local/bin/guard store copy --to postgres:": true,
			`"/opt/guard" approvals approve 0193`:            true,
			"guard --db /tmp/x.db approvals approve 0193":    true,
			`C:\tools\guard.exe unwrap --dry-run`:            true,
			"sh -c 'guard policy reload'":                    true,
			"the guard wraps the gift":                       false,
			"guardrails store":                               false,
		})
	}
	checks(t, protectedOn("windows", `C:\Users\me`, `C:\Users\me`, nil, `C:\guard\guard.db`), map[string]bool{
		`& "C:\Program Files\Guard\GUARD.EXE" Approvals approve 0193`: true,
	})
	checks(t, protectedOn("linux", "/home/me", "/home/me", nil, "/var/lib/guard/guard.db"), map[string]bool{
		"GUARD approvals approve 0193": false, // another program on Linux
	})
}

// On Linux names compare exactly; quoting, escapes and variables do not
// hide a path.
func TestSelfProtectionLinux(t *testing.T) {
	p := protectedOn("linux", "/home/me", "/home/me/work", map[string]string{"XDG_DATA_HOME": "/home/me/.local/share"},
		"/home/me/.local/share/guard", "/home/me/.config/guard/guard.yaml")
	checks(t, p, map[string]bool{
		"/home/me/.local/share/guard/guard.db":           true,
		"cat $XDG_DATA_HOME/guard/audit.key":             true,
		"cat ${HOME}/.config/guard/guard.yaml":           true,
		`cat ~/".local/share"/guard/ui.token`:            true,
		`cat /home/me/.local/share/gu\ard/guard.db`:      true,
		"/home/me/.local/share/Guard/guard.db":           false, // another directory on Linux
		"/home/me/.local/share/guardian/x":               false,
		"$UNKNOWN/guard/guard.db":                        false,
		"/home/me/.config/guard/guard.yaml.bak":          false,
		"../.local/share/guard/guard.db-wal":             true,
		"sqlite3 /home/me/.local/share/GUARD~1/guard.db": false, // no short names
	})
}

// On macOS names ignore case and Unicode normalization, and the data
// directory's space does not split a quoted or escaped path.
func TestSelfProtectionMacOS(t *testing.T) {
	p := protectedOn("darwin", "/Users/José", "/Users/José/work", nil,
		"/Users/José/Library/Application Support/guard")
	checks(t, p, map[string]bool{
		"/Users/José/Library/Application Support/guard/guard.db":                 true,
		"/users/JOSÉ/library/application support/GUARD/Guard.DB":                 true,
		"/Users/Jose\u0301/Library/Application Support/guard/audit.key":          true, // NFD
		`cat "$HOME/Library/Application Support/guard/ui.token"`:                 true,
		`cat ~/Library/Application\ Support/guard/guard.db`:                      true,
		`sqlite3 '/Users/José/Library/Application Support/Guard/guard.db' .dump`: true,
		"../Library/Application Support/guard":                                   true,
		"/Users/José/Library/Application Support/guardian":                       false,
		"/Users/José/Library/Application  Support/guard/guard.db":                false, // another name
		"/Users/José/Library/Application Support/other/guard.db":                 false,
		"echo Application Support/guard is where guard keeps its files on macOS": false, // relative to work
	})
}

// On Windows names ignore case, and every way Windows writes a path is
// read: backslashes, drives, \\?\ and \\.\, UNC and administrative
// shares, streams, trailing dots and spaces, 8.3 short names, variables
// of cmd and PowerShell, paths relative to the working directory, its
// drive or its drive's root.
func TestSelfProtectionWindows(t *testing.T) {
	home := `C:\Users\Long Name`
	vars := map[string]string{"USERPROFILE": home, "LOCALAPPDATA": home + `\AppData\Local`, "APPDATA": home + `\AppData\Roaming`,
		"HOMEDRIVE": "C:", "HOMEPATH": `\Users\Long Name`}
	p := protectedOn("windows", home, home+`\work`, vars, home+`\AppData\Local\guard`, home+`\AppData\Roaming\guard`)
	checks(t, p, map[string]bool{
		`C:\Users\Long Name\AppData\Local\guard\guard.db`:                    true,
		`c:/users/long name/appdata/local/GUARD/Guard.DB`:                    true,
		`\\?\C:\Users\Long Name\AppData\Local\guard\ui.token`:                true,
		`\\.\C:\Users\Long Name\AppData\Local\guard\ui.token`:                true,
		`\\?\UNC\localhost\C$\Users\Long Name\AppData\Local\guard\audit.key`: true,
		`\\127.0.0.1\c$\Users\Long Name\AppData\Local\guard\guard.db`:        true,
		`C:\Users\LONGNA~1\AppData\Local\guard\guard.db`:                     true,
		`C:\Users\LO1F2A~1\APPDATA\LOCAL\GUARD\GUARD.DB`:                     true,
		`C:\Users\Long Name\AppData\Local\guard\guard.db::$DATA`:             true,
		`C:\Users\Long Name\AppData\Local\guard.\guard.db`:                   true,
		`C:\Users\Long Name\AppData\Local\guard \guard.db`:                   true,
		`type %LOCALAPPDATA%\guard\ui.token`:                                 true,
		`Get-Content $env:localappdata\guard\audit.key`:                      true,
		`%HOMEDRIVE%%HOMEPATH%\AppData\Roaming\guard\guard.yaml`:             true,
		`~\AppData\Local\guard\guard.db`:                                     true,
		`..\AppData\Local\guard\guard.db`:                                    true,
		`\Users\Long Name\AppData\Local\guard`:                               true,
		`C:..\AppData\Roaming\guard\rules.d\approved.yaml`:                   true,
		`copy "C:\Users\Long Name\AppData\Local\guard\guard.db" D:\loot`:     true,
		`file:///C:/Users/Long%20Name/AppData/Local/guard/guard.db`:          false, // percent-escapes are a URI's (CheckURI)
		`file:///C:/Users/Long Name/AppData/Local/guard/guard.db`:            true,
		`D:\Users\Long Name\AppData\Local\guard\guard.db`:                    false, // another drive
		`\\fileserver\share\Users\Long Name\AppData\Local\guard\guard.db`:    false,
		`C:\Users\Long Name\AppData\Local\guardian\x`:                        false,
		`C:\Users\XY1234~1\AppData\Local\guard\guard.db`:                     false, // not a short name of Long Name
		`C:\Users\Long Name\AppData\Local\guard~notes.txt`:                   false,
		`the guard and C:\Users\Long Name\Documents\notes.txt`:               false,
	})
	for uri, deny := range map[string]bool{
		"file:///C:/Users/Long%20Name/AppData/Local/guard/guard.db": true,
		"file://localhost/c:/users/long%20name/appdata/local/GUARD": true,
		"file:///C:/Users/Long%20Name/Documents/notes.txt":          false,
	} {
		if got := p.CheckURI(uri) != ""; got != deny {
			t.Errorf("%s: denied=%v, want %v", uri, got, deny)
		}
	}
}

// A short name matches a long one it could stand for: the same first
// characters, spaces and dots left out, a numeral after the tilde, an
// extension of three letters at most.
func TestCouldBeShort(t *testing.T) {
	for _, tc := range []struct {
		short, long string
		want        bool
	}{
		{"PROGRA~1", "Program Files", true},
		{"progra~2", "Program Files (x86)", true},
		{"APPLIC~1", "Application Support", true},
		{"CONFIG~1", ".config", true}, // the leading dot left out
		{"AP12F3~1", "Application Data", true},
		{"GUARD~1.DB", "guard.database", true},
		{"GUARD~1.YAML", "guard.yaml", false},
		{"GUARD~", "guard", false},
		{"GUARD1", "guard", false},
		{"NOTES~1", "guard", false},
		{"TOOLONG~1", "toolongname", false},
	} {
		if got := couldBeShort(tc.short, tc.long); got != tc.want {
			t.Errorf("couldBeShort(%q, %q) = %v, want %v", tc.short, tc.long, got, tc.want)
		}
	}
	if !strings.EqualFold("GUARD", "guard") {
		t.Fatal("EqualFold")
	}
}
