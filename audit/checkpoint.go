package audit

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Signer holds the checkpoint key, which lives outside the database so that
// whoever can rewrite the database cannot also sign a shorter log, and the
// C2SP note signer and verifier derived from it. The key's name, which is
// also the checkpoints' origin, is derived from the public key (see
// originOf): replicas that share one key sign one log.
type Signer struct {
	key      ed25519.PrivateKey
	note     note.Signer
	verifier note.Verifier
	vkey     string // the verifier key, note.NewVerifier's form
	skey     string // the signer key, note.NewSigner's form (secret)
}

// originOf names the log, and its key, after the public key.
func originOf(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "guard-audit/" + hex.EncodeToString(sum[:8])
}

// NewSigner derives the note signer and verifier from an ed25519 seed.
func NewSigner(seed []byte) (*Signer, error) {
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	origin := originOf(pub)
	vkey, err := note.NewEd25519VerifierKey(origin, pub)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	skey := fmt.Sprintf("PRIVATE+KEY+%s+%08x+%s", origin, v.KeyHash(), base64.StdEncoding.EncodeToString(append([]byte{1}, seed...)))
	ns, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	return &Signer{key: key, note: ns, verifier: v, vkey: vkey, skey: skey}, nil
}

// SignerFromHex is the signer of a hex ed25519 seed given as text; what
// names the text in errors.
func SignerFromHex(what, text string) (*Signer, error) {
	seed, err := hex.DecodeString(strings.TrimSpace(text))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%s: not a hex ed25519 seed", what)
	}
	s, err := NewSigner(seed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// Verifier is the note verifier of the key: its name is the log's origin.
func (s *Signer) Verifier() note.Verifier { return s.verifier }

// NoteSigner is the note signer of the key.
func (s *Signer) NoteSigner() note.Signer { return s.note }

// VerifierKey is the verifier key, note.NewVerifier's form, to pin.
func (s *Signer) VerifierKey() string { return s.vkey }

// SecretForms returns the ways the checkpoint key may be written: its file's
// text (the hex seed), and the seed and the whole private key in hex (both
// cases) and base64 (standard and URL alphabets, padded or not). guard masks
// each wherever it appears; none of it is ever recorded.
func (s *Signer) SecretForms() []string {
	var out []string
	for _, b := range [][]byte{s.key.Seed(), s.key, append([]byte{1}, s.key.Seed()...)} {
		h := hex.EncodeToString(b)
		out = append(out, h, strings.ToUpper(h),
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
	}
	return append(out, s.skey)
}

// Derive is a secret for purpose derived from the key: HMAC-SHA256 of the
// purpose under the key's seed.
func (s *Signer) Derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.key.Seed())
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// Sign signs the checkpoint of a tree of size records with the given root,
// saying from which record on MACs are required when they are
// (macsFrom > 0).
func (s *Signer) Sign(size int64, root tlog.Hash, macsFrom int64) (*Checkpoint, error) {
	c := &Checkpoint{Origin: s.verifier.Name(), Size: size, Root: root, MACsFrom: macsFrom}
	var err error
	c.Note, err = note.Sign(&note.Note{Text: CheckpointText(c.Origin, size, root, macsFrom)}, s.note)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return c, nil
}

// LoadSigner reads the key file, creating it (0600) when it is missing.
func LoadSigner(path string) (*Signer, error) {
	s, err := ReadSigner(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := CreateKey(path); err != nil {
			return nil, err
		}
		s, err = ReadSigner(path)
	}
	return s, err
}

// ReadSigner reads the key file; the error wraps os.ErrNotExist when there
// is none.
func ReadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	return SignerFromHex("checkpoint key "+path, string(b))
}

// CreateKey writes a new key file. Several processes may open a new
// database at once: the key is written to a temporary file and linked into
// place, so a reader never sees a partial key and the first one wins.
func CreateKey(path string) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("checkpoint key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("checkpoint key: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".audit-key-*")
	if err != nil {
		return fmt.Errorf("checkpoint key: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(hex.EncodeToString(priv.Seed()) + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	return nil
}

// VerifierKeyOf is the verifier key of the checkpoint key in a key file.
func VerifierKeyOf(keyPath string) (string, error) {
	s, err := ReadSigner(keyPath)
	if err != nil {
		return "", err
	}
	return s.vkey, nil
}

// DerivedSecret is a secret for purpose derived from the checkpoint key in
// the file at keyPath (HMAC-SHA256 of the purpose under the key's seed, in
// hex): every replica that holds the one key of a log derives the same,
// and none of it tells the key.
func DerivedSecret(keyPath, purpose string) (string, error) {
	s, err := ReadSigner(keyPath)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(s.Derive(purpose)), nil
}

// Checkpoint is a signed statement of the tree: a C2SP signed note whose
// text is the log's origin, its size (records) and the base64 root hash of
// the tree over them, each on its own line, followed by a blank line and
// the ed25519 signature. A line after those (a C2SP extension line) may
// say from which record on the log's records carry MACs.
type Checkpoint struct {
	// Origin names the log and its key.
	Origin string
	// Size is how many records the tree holds.
	Size int64
	// Root is the tree's root hash.
	Root tlog.Hash
	// MACsFrom is the seq from which on every record carries a MAC, as
	// the checkpoint's "guard macs from N" line says (0: no such line).
	MACsFrom int64
	// Note is the signed note, as written.
	Note []byte
}

// macsLine opens the extension line that says where MACs start.
const macsLine = "guard macs from "

// CheckpointText is the body of the checkpoint of a tree, saying from
// which record on MACs are required when they are (macsFrom > 0).
func CheckpointText(origin string, size int64, root tlog.Hash, macsFrom int64) string {
	t := origin + "\n" + strconv.FormatInt(size, 10) + "\n" + root.String() + "\n"
	if macsFrom > 0 {
		t += macsLine + strconv.FormatInt(macsFrom, 10) + "\n"
	}
	return t
}

// OpenCheckpoint checks a signed checkpoint against the verifier and
// parses it. Its origin must be the key's name.
func OpenCheckpoint(msg []byte, v note.Verifier) (*Checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unknown *note.UnverifiedNoteError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("it is not signed by %s", v.Name())
		}
		return nil, fmt.Errorf("its signature does not verify: %w", err)
	}
	c, err := ParseCheckpoint(n.Text, msg)
	if err != nil {
		return nil, err
	}
	if c.Origin != v.Name() {
		return nil, fmt.Errorf("its origin %q is not the key's (%s)", c.Origin, v.Name())
	}
	return c, nil
}

// ParseCheckpoint reads a checkpoint's text, the body of its note msg.
func ParseCheckpoint(text string, msg []byte) (*Checkpoint, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 {
		return nil, errors.New("it is not a checkpoint: want origin, size and root hash lines")
	}
	c := &Checkpoint{Origin: lines[0], Note: msg}
	var err error
	if c.Size, err = strconv.ParseInt(lines[1], 10, 64); err != nil || c.Size < 0 || lines[1] != strconv.FormatInt(c.Size, 10) {
		return nil, fmt.Errorf("it is not a checkpoint: size %q", lines[1])
	}
	if c.Root, err = tlog.ParseHash(lines[2]); err != nil {
		return nil, fmt.Errorf("it is not a checkpoint: root hash %q", lines[2])
	}
	for _, l := range strings.Split(lines[3], "\n") {
		if n, ok := strings.CutPrefix(l, macsLine); ok {
			if c.MACsFrom, err = strconv.ParseInt(n, 10, 64); err != nil || c.MACsFrom < 1 {
				return nil, fmt.Errorf("it is not a checkpoint: %q", l)
			}
		}
	}
	return c, nil
}

// ReadUnsigned parses a signed checkpoint without checking its signature.
func ReadUnsigned(msg []byte) (*Checkpoint, error) {
	_, err := note.Open(msg, note.VerifierList())
	var u *note.UnverifiedNoteError
	if !errors.As(err, &u) {
		return nil, fmt.Errorf("it is not a signed note: %w", err)
	}
	return ParseCheckpoint(u.Note.Text, msg)
}

// OriginOfNote is the origin a checkpoint names (its first line), whoever
// signed it; "" for what is not a signed note.
func OriginOfNote(msg []byte) string {
	c, err := ReadUnsigned(msg)
	if err != nil {
		return ""
	}
	return c.Origin
}

// ParseVerifier reads a verifier key: its text (note.NewVerifier's form,
// as guard audit key prints it), or the name of a file holding it.
func ParseVerifier(key string) (note.Verifier, error) {
	k := strings.TrimSpace(key)
	if v, err := note.NewVerifier(k); err == nil {
		return v, nil
	}
	b, err := os.ReadFile(key)
	if err != nil {
		return nil, fmt.Errorf("key %q: neither a verifier key nor a file holding one", key)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", key, err)
	}
	return v, nil
}

// ErrRewritten is why a checkpoint is not signed: the log does not extend
// the last one.
var ErrRewritten = errors.New("the log does not extend the last checkpoint: it was truncated or rewritten")

// ProveExtends proves that the tree of the given size and root extends the
// checkpoint p, with a consistency proof from the stored tree.
func ProveExtends(p *Checkpoint, size int64, root tlog.Hash, hr tlog.HashReader) error {
	if p.Size > size {
		return fmt.Errorf("%w: the checkpoint of %d records is ahead of the log's %d", ErrRewritten, p.Size, size)
	}
	if p.Size == size {
		if p.Root != root {
			return fmt.Errorf("%w: the tree of %d records has another root than its checkpoint", ErrRewritten, size)
		}
		return nil
	}
	proof, err := tlog.ProveTree(size, p.Size, hr)
	if err == nil {
		err = tlog.CheckTree(proof, size, root, p.Size, p.Root)
	}
	if err != nil {
		return fmt.Errorf("%w: the tree of %d records is not consistent with the checkpoint of %d: %v", ErrRewritten, size, p.Size, err)
	}
	return nil
}

// ReadCheckpointFile reads and checks a checkpoint file.
func ReadCheckpointFile(path string, v note.Verifier) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := OpenCheckpoint(b, v)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return c, nil
}

// WriteFileAtomic replaces the file at path with b (0600), synced.
func WriteFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
