package checkpoint

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nandi-go/nandi/transport"
)

// The unfinished positions of a mark are stored as one string of
// space-separated tokens, ascending: the first is absolute (HI-LO, 20
// digits each, as every position of the ledger), each other is relative to
// the one before: "+D" is the same Hi and a Lo D higher (offsets, and
// entries of one millisecond of a Redis stream), "H:L" is a Hi H higher
// with Lo L. A list of n positions costs about 41 + 4n bytes instead of
// 41n. Absolute tokens are read anywhere (ledgers written before this
// encoding list only those).

// encodeUndone encodes ps, which must ascend strictly.
func encodeUndone(ps []transport.Position) string {
	if len(ps) == 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(41 + 5*len(ps))
	b.WriteString(encode(ps[0]))
	var num [20]byte
	for i := 1; i < len(ps); i++ {
		prev, p := ps[i-1], ps[i]
		b.WriteByte(' ')
		if p.Hi == prev.Hi {
			b.WriteByte('+')
			b.Write(strconv.AppendUint(num[:0], p.Lo-prev.Lo, 10))
			continue
		}
		b.Write(strconv.AppendUint(num[:0], p.Hi-prev.Hi, 10))
		b.WriteByte(':')
		b.Write(strconv.AppendUint(num[:0], p.Lo, 10))
	}
	return b.String()
}

// decodeUndone decodes what encodeUndone wrote, or a list of absolute
// positions.
func decodeUndone(s string) ([]transport.Position, error) {
	fields := strings.Fields(s)
	out := make([]transport.Position, 0, len(fields))
	for i, f := range fields {
		var p transport.Position
		switch {
		case strings.Contains(f, "-"):
			x, err := decode(f)
			if err != nil {
				return nil, err
			}
			p = x
		case i == 0:
			return nil, fmt.Errorf("%w: unfinished positions begin with the relative %q", ErrCorrupt, f)
		case f[0] == '+':
			d, err := strconv.ParseUint(f[1:], 10, 64)
			if err != nil || d == 0 {
				return nil, fmt.Errorf("%w: bad unfinished position %q", ErrCorrupt, f)
			}
			p = transport.Position{Hi: out[i-1].Hi, Lo: out[i-1].Lo + d}
		default:
			hs, ls, ok := strings.Cut(f, ":")
			h, err1 := strconv.ParseUint(hs, 10, 64)
			l, err2 := strconv.ParseUint(ls, 10, 64)
			if !ok || err1 != nil || err2 != nil || h == 0 {
				return nil, fmt.Errorf("%w: bad unfinished position %q", ErrCorrupt, f)
			}
			p = transport.Position{Hi: out[i-1].Hi + h, Lo: l}
		}
		if i > 0 && !out[i-1].Less(p) {
			return nil, fmt.Errorf("%w: unfinished positions out of order at %q", ErrCorrupt, f)
		}
		out = append(out, p)
	}
	return out, nil
}
