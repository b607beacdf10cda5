package clients

// document is a client's file parsed for editing in its own syntax.
type document interface {
	// entries lists the servers of the map at the path of keys, in the
	// file's order (none when the map is absent).
	entries(section []string) ([]docEntry, error)
	// apply edits one entry in place.
	apply(section []string, name string, ops []op) error
	// setEntry replaces one entry's whole text (as entries gave it).
	setEntry(section []string, name, text string) error
	bytes() []byte
}

// docEntry is one server's entry as the file has it.
type docEntry struct {
	name string
	// value is the entry decoded; nil when it is not an object.
	value map[string]any
	// text is the entry's exact text, for the record of a change.
	text string
	// fixed, when not "", says why guard does not edit the entry.
	fixed string
}

// op is one edit of an entry's members. Edits keep the members they do
// not name, and the file's formatting around them.
type op struct {
	kind opKind
	key  string
	// value is a string, a []string or a []member (for opTrim, an int).
	value any
	// before and after place a new member next to another (else it goes
	// last).
	before, after string
}

type opKind int

const (
	opSet        opKind = iota // the member's value, added if absent
	opDelete                   // the member, if present
	opPrepend                  // strings at the front of a list, which is made if absent
	opAppend                   // strings at the end of a list, which is made if absent
	opAddMembers               // string members at the end of an object, which is made if absent
	opTrim                     // the first value (an int) elements of a list
)

// member is one member of an object of strings (an env).
type member struct{ key, value string }
