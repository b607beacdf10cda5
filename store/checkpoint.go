package store

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// signer holds the checkpoint key, which lives outside the database so that
// whoever can rewrite the database cannot also sign a shorter log, and the
// C2SP note signer and verifier derived from it. The key's name, which is
// also the checkpoints' origin, is derived from the public key (see
// originOf): replicas that share one key sign one log.
type signer struct {
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

// newSigner derives the note signer and verifier from an ed25519 seed.
func newSigner(seed []byte) (*signer, error) {
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
	return &signer{key: key, note: ns, verifier: v, vkey: vkey, skey: skey}, nil
}

// SecretForms returns the ways the checkpoint key may be written: its file's
// text (the hex seed), and the seed and the whole private key in hex (both
// cases) and base64 (standard and URL alphabets, padded or not). guard masks
// each wherever it appears; none of it is ever recorded.
func (db *DB) SecretForms() []string {
	var out []string
	for _, b := range [][]byte{db.signer.key.Seed(), db.signer.key, append([]byte{1}, db.signer.key.Seed()...)} {
		h := hex.EncodeToString(b)
		out = append(out, h, strings.ToUpper(h),
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
	}
	return append(out, db.signer.skey)
}

// loadSigner reads the key file, creating it (0600) when it is missing.
func loadSigner(path string) (*signer, error) {
	s, err := readSigner(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := createKey(path); err != nil {
			return nil, err
		}
		s, err = readSigner(path)
	}
	return s, err
}

// readSigner reads the key file; the error wraps os.ErrNotExist when there
// is none.
func readSigner(path string) (*signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("checkpoint key %s: not a hex ed25519 seed", path)
	}
	s, err := newSigner(seed)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	return s, nil
}

// createKey writes a new key file. Several processes may open a new
// database at once: the key is written to a temporary file and linked into
// place, so a reader never sees a partial key and the first one wins.
func createKey(path string) error {
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

// Checkpoint is a signed statement of the tree: a C2SP signed note whose
// text is the log's origin, its size (records) and the base64 root hash of
// the tree over them, each on its own line, followed by a blank line and
// the ed25519 signature. A line after those (a C2SP extension line) may
// say from which record on the log's records carry MACs (mac.go).
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
	// MACsFrom is the seq from which on every record carries a MAC, as
	// the checkpoint's "guard macs from N" line says (0: no such line).
	MACsFrom int64
	Note     []byte // the signed note, as written
}

// macsLine opens the extension line that says where MACs start.
const macsLine = "guard macs from "

// checkpointText is the body of the checkpoint of a tree, saying from
// which record on MACs are required when they are (macsFrom > 0).
func checkpointText(origin string, size int64, root tlog.Hash, macsFrom int64) string {
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
	c, err := parseCheckpoint(n.Text, msg)
	if err != nil {
		return nil, err
	}
	if c.Origin != v.Name() {
		return nil, fmt.Errorf("its origin %q is not the key's (%s)", c.Origin, v.Name())
	}
	return c, nil
}

// parseCheckpoint reads a checkpoint's text, the body of its note msg.
func parseCheckpoint(text string, msg []byte) (*Checkpoint, error) {
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

// VerifierKey is the verifier key of the log's checkpoint key, to pin.
func (vr Verifier) VerifierKey() (string, error) {
	if vr.db.signer == nil {
		return "", fmt.Errorf("there is no checkpoint key at %s", vr.db.opts.KeyPath)
	}
	return vr.db.signer.vkey, nil
}

// VerifierKeyOf is the verifier key of the checkpoint key in a key file.
func VerifierKeyOf(keyPath string) (string, error) {
	s, err := readSigner(keyPath)
	if err != nil {
		return "", err
	}
	return s.vkey, nil
}

// errRewritten is why a checkpoint is not signed: the log does not extend
// the last one.
var errRewritten = errors.New("the log does not extend the last checkpoint: it was truncated or rewritten")

// writeCheckpoint signs the tree's current size and root, once it is
// proved consistent with the last checkpoint kept in the database and the
// one in the file beside it, keeps it in the checkpoints table, writes it
// to the file and hands it to the witnesses. A log that does not extend
// the last checkpoint gets no new one: the refusal is logged and counted.
func (cp *checkpointState) writeCheckpoint() (err error) {
	// dirty is cleared before the head is read: a commit that lands
	// meanwhile (a caller's own, in AppendAsync) sets it again, and is
	// covered by the next checkpoint. A failure leaves it set.
	if cp.dirty.Swap(false) {
		defer func() {
			if err != nil {
				cp.dirty.Store(true)
			}
		}()
	}
	path := cp.db.opts.CheckpointPath
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer unlock()
	c, fresh, err := cp.signCheckpoint(context.Background(), path)
	if errors.Is(err, errRewritten) {
		cp.db.stats.refused.Add(1)
		return err
	}
	if err != nil || c == nil {
		return err
	}
	if old, err := readCheckpointFile(path, cp.db.signer.verifier); err != nil || old.Size < c.Size {
		if err := writeFileAtomic(path, c.Note); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	cp.lastCheckpoint.Store(time.Now().UnixNano())
	cp.signedSize.Store(c.Size)
	if fresh && cp.witness != nil {
		cp.witness.send(c)
	}
	return nil
}

// logCheckpoint logs why a checkpoint was not written. A log that does not
// extend the last checkpoint stays so: that is logged as an error once,
// and counted each time (CheckpointRefusals). A record without a valid
// MAC stays too: it was alerted (IntegrityAlerts) when it was found.
func (cp *checkpointState) logCheckpoint(err error) {
	if (errors.Is(err, errRewritten) || errors.Is(err, errUnauthenticated)) && cp.refusedLogged.Swap(true) {
		cp.db.opts.Logger.Debug("audit checkpoint refused", "err", err)
		return
	}
	cp.db.opts.Logger.Error("audit checkpoint", "err", err)
}

// signCheckpoint signs and keeps the checkpoint of the tree as it is, in
// one write transaction; fresh reports that it was not kept before. It
// returns nil when the log is empty.
func (cp *checkpointState) signCheckpoint(ctx context.Context, path string) (c *Checkpoint, fresh bool, err error) {
	err = cp.writerTx(ctx, func(conn *sql.Conn) (bool, error) {
		// What it signs is on disk first, with either durability: the
		// ingester's commits are not synced, and a checkpoint ahead of
		// the log after a power cut would read as a truncation for
		// good. The write lock held here keeps new commits out until
		// the size is read.
		if err := cp.db.ing.syncFiles(); err != nil {
			return false, fmt.Errorf("checkpoint: %w", err)
		}
		c, fresh, err = cp.signIn(ctx, conn, path)
		return fresh, err
	})
	return c, fresh, err
}

// writerTx runs fn in a write transaction on the audit writer's
// connection, committed when fn says so. The writer's knowledge of the
// chain's tail survives it (writerConn.chainTail): a checkpoint is not
// another writer's commit.
func (cp *checkpointState) writerTx(ctx context.Context, fn func(*sql.Conn) (bool, error)) (err error) {
	cp.db.ing.commitMu.Lock()
	defer cp.db.ing.commitMu.Unlock()
	if cp.db.ing.wc == nil {
		if cp.db.ing.wc, err = newWriterConn(ctx, cp.db.aw, cp.db.auth); err != nil {
			return err
		}
	}
	wc := cp.db.ing.wc
	if _, err := wc.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	same := false
	_ = wc.conn.Raw(func(dc any) error {
		v, err := dataVersion(dc)
		same = err == nil && wc.known && v == wc.version
		return nil
	})
	commit, err := fn(wc.conn)
	if err != nil || !commit {
		_, _ = wc.conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	if _, err := wc.conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = wc.conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("commit: %w", err)
	}
	if same {
		_ = wc.conn.Raw(func(dc any) error {
			if v, err := dataVersion(dc); err == nil {
				wc.version = v
			}
			return nil
		})
	}
	return nil
}

// signIn is signCheckpoint inside the transaction on conn.
func (cp *checkpointState) signIn(ctx context.Context, conn *sql.Conn, path string) (c *Checkpoint, fresh bool, err error) {
	size, err := treeSize(ctx, conn)
	if err != nil || size == 0 {
		return nil, false, err
	}
	hr := sqlHashReader(ctx, conn)
	root, err := tlog.TreeHash(size, hr)
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	}
	// The last checkpoint kept, and the file's (another process may
	// have written it, or it may be all that is left of one); the last
	// one this process signed, and the latest each file witness held
	// when this process first signed one: none of them is in the
	// database, which whoever truncates the log may also empty of its
	// checkpoints.
	var prev []*Checkpoint
	var kept int64
	var text string
	err = conn.QueryRowContext(ctx, `SELECT size, note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&kept, &text)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	default:
		p, err := OpenCheckpoint([]byte(text), cp.db.signer.verifier)
		if err != nil {
			return nil, false, fmt.Errorf("checkpoint: the last one kept (%d records): %w", kept, err)
		}
		prev = append(prev, p)
	}
	switch p, err := readCheckpointFile(path, cp.db.signer.verifier); {
	case err == nil:
		prev = append(prev, p)
	case !errors.Is(err, os.ErrNotExist):
		cp.db.opts.Logger.Warn("the checkpoint file is not one of this log's checkpoints: it is replaced", "err", err)
	}
	if p := cp.lastSigned.Load(); p != nil {
		prev = append(prev, p)
	}
	if cp.witness != nil {
		prev = append(prev, cp.witness.latestHeld(cp.db.signer.verifier)...)
	}
	var after int64
	for _, p := range prev {
		if err := proveExtends(p, size, root, hr); err != nil {
			return nil, false, err
		}
		after = max(after, p.Size)
		cp.db.auth.learn(p)
	}
	from, err := cp.checkTail(ctx, conn, after, size)
	if err != nil {
		return nil, false, err
	}
	c = &Checkpoint{Origin: cp.db.signer.verifier.Name(), Size: size, Root: root, MACsFrom: from}
	c.Note, err = note.Sign(&note.Note{Text: checkpointText(c.Origin, size, root, from)}, cp.db.signer.note)
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	}
	cp.lastSigned.Store(c)
	cp.db.ing.wc.dropOwn(size)
	if size <= kept {
		return c, false, nil
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO checkpoints (size, note, time) VALUES (?, ?, ?)`,
		size, string(c.Note), fmtTime(cp.db.opts.Now())); err != nil {
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	}
	return c, true, nil
}

// proveExtends proves that the tree of the given size and root extends the
// checkpoint p, with a consistency proof from the stored tree.
func proveExtends(p *Checkpoint, size int64, root tlog.Hash, hr tlog.HashReader) error {
	if p.Size > size {
		return fmt.Errorf("%w: the checkpoint of %d records is ahead of the log's %d", errRewritten, p.Size, size)
	}
	if p.Size == size {
		if p.Root != root {
			return fmt.Errorf("%w: the tree of %d records has another root than its checkpoint", errRewritten, size)
		}
		return nil
	}
	proof, err := tlog.ProveTree(size, p.Size, hr)
	if err == nil {
		err = tlog.CheckTree(proof, size, root, p.Size, p.Root)
	}
	if err != nil {
		return fmt.Errorf("%w: the tree of %d records is not consistent with the checkpoint of %d: %v", errRewritten, size, p.Size, err)
	}
	return nil
}

// readCheckpointFile reads and checks a checkpoint file.
func readCheckpointFile(path string, v note.Verifier) (*Checkpoint, error) {
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

// writeFileAtomic replaces the file at path with b (0600), synced.
func writeFileAtomic(path string, b []byte) error {
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

// LatestCheckpoint is the latest checkpoint kept in the database (or, when
// none is, the one in the file beside it), checked against the log's key.
func (db *DB) LatestCheckpoint(ctx context.Context) (*Checkpoint, error) {
	db.ing.caughtUp(ctx)
	if db.signer == nil {
		return nil, fmt.Errorf("there is no checkpoint key at %s", db.opts.KeyPath)
	}
	var text string
	err := db.r.QueryRowContext(ctx, `SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		c, err := readCheckpointFile(db.opts.CheckpointPath, db.signer.verifier)
		if errors.Is(err, os.ErrNotExist) {
			return nil, errors.New("no checkpoint yet: the log is empty")
		}
		return c, err
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := OpenCheckpoint([]byte(text), db.signer.verifier)
	if err != nil {
		return nil, fmt.Errorf("the latest checkpoint kept: %w", err)
	}
	return c, nil
}

// CheckpointRefusals is how many times a checkpoint was not signed because
// the log did not extend the last one (it was truncated or rewritten).
func (ig Integrity) CheckpointRefusals() int64 { return ig.db.stats.refused.Load() }

// DerivedSecret is a secret for purpose derived from the checkpoint key in
// the file at keyPath (HMAC-SHA256 of the purpose under the key's seed, in
// hex): every replica that holds the one key of a log derives the same,
// and none of it tells the key.
func DerivedSecret(keyPath, purpose string) (string, error) {
	s, err := readSigner(keyPath)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(s.derive(purpose)), nil
}

// derive is a secret for purpose derived from the key: HMAC-SHA256 of the
// purpose under the key's seed.
func (s *signer) derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.key.Seed())
	m.Write([]byte(purpose))
	return m.Sum(nil)
}
