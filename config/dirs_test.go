package config

import "testing"

// Each OS keeps guard's files where it keeps a program's: XDG on Linux,
// Application Support on macOS (unless XDG says otherwise), AppData on
// Windows.
func TestDirsFor(t *testing.T) {
	for _, tc := range []struct {
		goos, home string
		env        map[string]string
		cfg, data  string
	}{
		{"linux", "/home/me", nil, "/home/me/.config/guard", "/home/me/.local/share/guard"},
		{"linux", "/home/me", map[string]string{"XDG_CONFIG_HOME": "/cfg", "XDG_DATA_HOME": "/data/"}, "/cfg/guard", "/data/guard"},
		{"freebsd", "/home/me", nil, "/home/me/.config/guard", "/home/me/.local/share/guard"},
		{"darwin", "/Users/me", nil, "/Users/me/Library/Application Support/guard", "/Users/me/Library/Application Support/guard"},
		{"darwin", "/Users/me", map[string]string{"XDG_CONFIG_HOME": "/Users/me/.config"}, "/Users/me/.config/guard", "/Users/me/Library/Application Support/guard"},
		{"darwin", "/Users/me", map[string]string{"XDG_DATA_HOME": "/Users/me/.local/share"}, "/Users/me/Library/Application Support/guard", "/Users/me/.local/share/guard"},
		{"windows", `C:\Users\me`, map[string]string{"APPDATA": `C:\Users\me\AppData\Roaming`, "LOCALAPPDATA": `C:\Users\me\AppData\Local`},
			`C:\Users\me\AppData\Roaming\guard`, `C:\Users\me\AppData\Local\guard`},
		{"windows", `C:\Users\me\`, nil, `C:\Users\me\AppData\Roaming\guard`, `C:\Users\me\AppData\Local\guard`},
		// XDG is not Windows'.
		{"windows", `D:\home`, map[string]string{"APPDATA": `E:\roam\`, "XDG_CONFIG_HOME": `D:\xdg`}, `E:\roam\guard`, `D:\home\AppData\Local\guard`},
	} {
		cfg, data := DirsFor(tc.goos, func(k string) string { return tc.env[k] }, tc.home)
		if cfg != tc.cfg || data != tc.data {
			t.Errorf("%s, home %s, %v: %q and %q, want %q and %q", tc.goos, tc.home, tc.env, cfg, data, tc.cfg, tc.data)
		}
	}
}
