package config

import "strings"

// shellWordChars are the characters a value may hold to reach a node's
// startup script unquoted: letters, digits and . _ : / = , @ % + - [ ] ~.
// Such a value is one shell word, one systemd argument and one YAML scalar
// as it stands; spaces, quotes, $, `, \, ;, &, |, <, >, newlines and every
// other control character are not among them.
const shellWordChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/=,@%+-[]~"

// IsShellWord reports whether s is non-empty and made only of
// shellWordChars.
func IsShellWord(s string) bool {
	return s != "" && strings.Trim(s, shellWordChars) == ""
}
