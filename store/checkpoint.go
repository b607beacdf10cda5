package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// signer holds the checkpoint key, which lives outside the database so that
// whoever can rewrite the database cannot also sign a shorter log.
type signer struct {
	key ed25519.PrivateKey
}

// SecretForms returns the ways the checkpoint key may be written: its file's
// text (the hex seed), and the seed and the whole private key in hex (both
// cases) and base64 (standard and URL alphabets, padded or not). guard masks
// each wherever it appears; none of it is ever recorded.
func (db *DB) SecretForms() []string {
	var out []string
	for _, b := range [][]byte{db.signer.key.Seed(), db.signer.key} {
		h := hex.EncodeToString(b)
		out = append(out, h, strings.ToUpper(h),
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
	}
	return out
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
	return &signer{key: ed25519.NewKeyFromSeed(seed)}, nil
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

// checkpoint is the signed statement of the log's length and head.
type checkpoint struct {
	V         int    `json:"v"`
	Count     int64  `json:"count"`
	HeadSeq   int64  `json:"head_seq"`
	HeadHash  string `json:"head_hash"`
	Time      string `json:"time"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

func (c *checkpoint) message() []byte {
	return []byte("guard-checkpoint-v1\n" + strconv.FormatInt(c.Count, 10) + "\n" +
		strconv.FormatInt(c.HeadSeq, 10) + "\n" + c.HeadHash + "\n" + c.Time + "\n")
}

// writeCheckpoint signs the log's current length and head and writes it beside
// the database, unless the checkpoint there already counts more records
// (another process wrote a newer one).
func (db *DB) writeCheckpoint() (err error) {
	// dirty is cleared before the head is read: a commit that lands
	// meanwhile (a caller's own, in AppendAsync) sets it again, and is
	// covered by the next checkpoint. A failure leaves it set.
	if db.dirty.Swap(false) {
		defer func() {
			if err != nil {
				db.dirty.Store(true)
			}
		}()
	}
	if db.fsync {
		// The head it signs is durable first: the ingester's commits
		// are not synced, and a checkpoint ahead of the log after a
		// power cut would read as a truncation.
		if err := db.syncFiles(); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	ctx := context.Background()
	c := checkpoint{V: 1, Time: fmtTime(db.opts.Now())}
	err = db.w.QueryRowContext(ctx, `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`).Scan(&c.HeadSeq, &c.HeadHash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// The chain numbers its records 1, 2, 3… with no gap (each commit
	// continues from the tail inside its transaction), so the head's seq
	// is the count: counting the rows would read the whole table, every
	// second on a busy day, at a cost that grows with the log. A record
	// taken out of the chain breaks its links, which verify reports.
	c.Count = c.HeadSeq
	c.PublicKey = hex.EncodeToString(db.signer.key.Public().(ed25519.PublicKey))
	c.Signature = hex.EncodeToString(ed25519.Sign(db.signer.key, c.message()))
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	path := db.opts.CheckpointPath
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer unlock()
	if old, err := readCheckpoint(path); err == nil && old.Count > c.Count {
		db.lastCheckpoint.Store(time.Now().UnixNano())
		return nil
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	db.lastCheckpoint.Store(time.Now().UnixNano())
	return nil
}

func readCheckpoint(path string) (*checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return &c, nil
}

// checkCheckpoint compares the log with the signed checkpoint; it returns
// a problem for people, or "".
func (db *DB) checkCheckpoint(ctx context.Context, count int64) string {
	c, err := readCheckpoint(db.opts.CheckpointPath)
	if errors.Is(err, os.ErrNotExist) {
		if count == 0 {
			return ""
		}
		return fmt.Sprintf("no checkpoint at %s: truncation of the log cannot be ruled out", db.opts.CheckpointPath)
	}
	if err != nil {
		return err.Error()
	}
	if db.signer == nil {
		return fmt.Sprintf("there is no checkpoint key at %s: the checkpoint at %s cannot be checked", db.opts.KeyPath, db.opts.CheckpointPath)
	}
	pub := db.signer.key.Public().(ed25519.PublicKey)
	sig, err := hex.DecodeString(c.Signature)
	if err != nil || c.PublicKey != hex.EncodeToString(pub) || !ed25519.Verify(pub, c.message(), sig) {
		return fmt.Sprintf("the checkpoint at %s is not signed by this log's key", db.opts.CheckpointPath)
	}
	if count < c.Count {
		return fmt.Sprintf("the log was truncated: the checkpoint of %s counts %d records, the log has %d", c.Time, c.Count, count)
	}
	var h string
	err = db.r.QueryRowContext(ctx, `SELECT hash FROM records WHERE seq = ?`, c.HeadSeq).Scan(&h)
	if err != nil || h != c.HeadHash {
		return fmt.Sprintf("record %d does not match the checkpoint of %s: the log was truncated or rewritten", c.HeadSeq, c.Time)
	}
	return ""
}
