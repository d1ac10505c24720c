package pgsink

import (
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/nandi-go/nandi/transport"
)

// position is a transport.Position as two bigints that compare as it
// does: each half's top bit flipped (uint64 order as int64 order).
type position struct{ hi, lo int64 }

func encode(p transport.Position) position {
	return position{hi: int64(p.Hi ^ 1<<63), lo: int64(p.Lo ^ 1<<63)}
}

func positionOf(m *transport.Message) position { return encode(m.Position) }

// queries are the sink's statements on its schema.
type queries struct {
	schema, claim, raise, forget string
}

func newQueries(schema string) queries {
	id := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("$S.", id+".")
	return queries{
		schema: r.Replace(`
CREATE TABLE IF NOT EXISTS $S.nandi_done (
  grp text NOT NULL, shard int NOT NULL, hi bigint NOT NULL, lo bigint NOT NULL,
  token bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (grp, shard, hi, lo));
CREATE TABLE IF NOT EXISTS $S.nandi_fence (
  grp text NOT NULL, key text NOT NULL, token bigint NOT NULL,
  PRIMARY KEY (grp, key));
CREATE TABLE IF NOT EXISTS $S.nandi_low (
  grp text NOT NULL, shard int NOT NULL, hi bigint NOT NULL, lo bigint NOT NULL,
  PRIMARY KEY (grp, shard));`),
		// One round trip per task: take the key's fence (a row lock held
		// to commit; refused when a newer token holds it), and record the
		// task as done unless it is below the watermark or recorded
		// already. fenced: not f; already done: f and not d.
		claim: r.Replace(`
WITH f AS (
  INSERT INTO $S.nandi_fence AS x (grp, key, token) VALUES ($1, $2, $3)
  ON CONFLICT (grp, key) DO UPDATE SET token = EXCLUDED.token WHERE x.token <= EXCLUDED.token
  RETURNING 1),
d AS (
  INSERT INTO $S.nandi_done (grp, shard, hi, lo, token)
  SELECT $1, $4, $5, $6, $3
  WHERE EXISTS (SELECT 1 FROM f)
    AND NOT EXISTS (SELECT 1 FROM $S.nandi_low w WHERE w.grp = $1 AND w.shard = $4 AND (w.hi, w.lo) > ($5, $6))
  ON CONFLICT DO NOTHING
  RETURNING 1)
SELECT EXISTS (SELECT 1 FROM f), EXISTS (SELECT 1 FROM d)`),
		raise: r.Replace(`
INSERT INTO $S.nandi_low AS w (grp, shard, hi, lo) VALUES ($1, $2, $3, $4)
ON CONFLICT (grp, shard) DO UPDATE SET hi = EXCLUDED.hi, lo = EXCLUDED.lo
WHERE (w.hi, w.lo) < (EXCLUDED.hi, EXCLUDED.lo)`),
		forget: r.Replace(`
DELETE FROM $S.nandi_done WHERE grp = $1 AND shard = $2 AND (hi, lo) < ($3, $4)`),
	}
}
