// Package clients finds the MCP clients' configuration files (Claude
// Desktop, Claude Code, Cursor, VS Code, Windsurf, Gemini CLI, Codex) on
// Linux, macOS and Windows, and puts guard in front of the servers they
// list: each entry rewritten in place to start `guard run`, the rest of the
// file untouched to the byte, and every change recorded so that it can be
// given back exactly.
//
// Where each client keeps its files is a pure function of the operating
// system, the environment and the home directory (Env), so that every
// system's layout can be tested on any of them.
package clients
