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
	schema, claim, unrecord, raise, forget string
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
		// One statement per batch, a row per task in the order given:
		// take each key's fence (a row lock held to commit, taken in key
		// order; refused when a newer token holds it), and record each
		// task as done unless it is below the watermark or recorded
		// already. fenced: not f; already done: f and not d. The keys of a
		// batch are distinct.
		claim: r.Replace(`
WITH t AS (
  SELECT * FROM unnest($2::text[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[])
    WITH ORDINALITY AS t(key, token, shard, hi, lo, n)),
f AS (
  INSERT INTO $S.nandi_fence AS x (grp, key, token)
  SELECT $1, key, token FROM t ORDER BY key
  ON CONFLICT (grp, key) DO UPDATE SET token = EXCLUDED.token WHERE x.token <= EXCLUDED.token
  RETURNING key),
d AS (
  INSERT INTO $S.nandi_done (grp, shard, hi, lo, token)
  SELECT $1, t.shard, t.hi, t.lo, t.token FROM t
  WHERE t.key IN (SELECT key FROM f)
    AND NOT EXISTS (SELECT 1 FROM $S.nandi_low w WHERE w.grp = $1 AND w.shard = t.shard AND (w.hi, w.lo) > (t.hi, t.lo))
  ON CONFLICT DO NOTHING
  RETURNING shard, hi, lo)
SELECT t.key IN (SELECT key FROM f), (t.shard, t.hi, t.lo) IN (SELECT shard, hi, lo FROM d)
FROM t ORDER BY t.n`),
		// A failed task's record, rolled back with its effect.
		unrecord: r.Replace(`
DELETE FROM $S.nandi_done WHERE grp = $1 AND shard = $2 AND hi = $3 AND lo = $4`),
		raise: r.Replace(`
INSERT INTO $S.nandi_low AS w (grp, shard, hi, lo) VALUES ($1, $2, $3, $4)
ON CONFLICT (grp, shard) DO UPDATE SET hi = EXCLUDED.hi, lo = EXCLUDED.lo
WHERE (w.hi, w.lo) < (EXCLUDED.hi, EXCLUDED.lo)`),
		forget: r.Replace(`
DELETE FROM $S.nandi_done WHERE grp = $1 AND shard = $2 AND (hi, lo) < ($3, $4)`),
	}
}
