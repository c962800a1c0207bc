// Package redisstore keeps a fleet's shared state on Redis: a
// fleet.SharedState for Clients of one Google project in many
// processes, given to each with geminiguard.WithSharedState, and an
// answer cache shared by them (NewAnswerCache, for
// geminiguard.WithAnswerCache).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	client, err := geminiguard.New(ctx,
//		geminiguard.WithAPIKey(key),
//		geminiguard.WithSharedState(redisstore.New(rdb)))
//
// # Round trips
//
// Lease and Publish are each one round trip: one EVALSHA of a Lua script
// (EVAL the first time a server sees it, after a restart or a SCRIPT
// FLUSH), atomic on the server and timed by the server's clock (TIME), so
// replicas' clocks never skew the windows or expiries. A Lease that
// carries the next model's request (fleet.LeaseRequest.Next) evaluates it
// in the same script when the first model grants nothing. StoreAnswer and
// LoadAnswer (idempotency keys fleet-wide: fleet.AnswerStore) are
// one SET PX and one GET; PutJob, Jobs and DropJob (the open batches:
// fleet.JobStore) one script each.
//
// # Keys
//
// For a project P (the Client's project id: a hash of the API key or the
// Vertex AI project, never a key) under the prefix (WithPrefix, default
// "geminiguard"), with M a model and E an endpoint:
//
//	prefix:{P}:version           string: the project's fact version
//	prefix:{P}:facts             hash: one field per fact slot, value the fact as JSON
//	                             (times in unix milliseconds); FactKind's merge rules run in the script
//	prefix:{P}:replicas          sorted set: replica id → live until (unix ms); those no
//	                             longer live leave when a replica joins
//	prefix:{P}:m:M:win           hash: r:<second> → requests, t:<second> → tokens,
//	                             the last 60 seconds (RPM and TPM)
//	prefix:{P}:m:M:rpd:<dayEnd>  counter: requests in the Pacific day ending at dayEnd (unix s)
//	prefix:{P}:m:M:probe:E       string: the replica holding the half-open probe slot
//	prefix:{P}:idem:K            string: the answer of an idempotency key (AnswerStore), K a
//	                             hex SHA-256 of the caller's key, expiring with the key's TTL
//	prefix:{P}:jobs              hash: batch name → the open batch's handle (fleet.JobStore)
//	prefix:{P}:jobs:x            sorted set: batch name → its expiry (unix ms), at most
//	                             fleet.MaxJobs; both keys expire with their latest batch
//
// NewAnswerCache, a geminiguard.AnswerCache on Redis that needs no fleet
// mode, keeps each answer under prefix:cache:<key> (key: a model family
// and a SHA-256 of the request), expiring with the cache's TTL.
//
// Every key expires: the window 61 s after its last write (older seconds
// are pruned on each Lease), the day counter an hour after the day ends,
// the probe slot when the probe's hold ends, the replicas set when its
// last replica's heartbeat runs out, and the facts hash with its version
// when the last of its facts ends (a cool-down or open breaker at its
// Until, a closed breaker a minute after, a learned limit a day after).
// Ended facts are dropped lazily. A version key made afresh starts at the
// server's time in microseconds, above any version its predecessor
// reached, so a replica never mistakes new facts for ones it has seen.
//
// # Servers
//
// Redis 7.0 or later, or Valkey (the scripts use PEXPIRETIME and cjson).
// All of a project's keys share the hash tag {P}, so a project lives in
// one slot and the scripts run on Redis Cluster; pass a
// *redis.ClusterClient, or a failover client for Sentinel. Projects spread
// over the slots.
//
// # When Redis is down
//
// Round trips are bounded by the Client from their own latency, within
// WithTimeouts (30 ms to 250 ms by default); New's first, on a cold
// connection, by WithWarmUp (1 s); the Client goes alone after WithFailures
// (3) failed round trips, for WithAloneFor (2 s). Subscribe returns at once
// and subscribes in the background, retrying until Redis answers.
//
// The Store only returns errors: a Lease or Publish that cannot reach
// Redis, or that outlasts its context, fails with the connection's or the
// context's error, and a cancelled context fails at once without a round
// trip. The Client gives each call a deadline of tens of milliseconds,
// keeps a breaker around the store, and on any error carries on with local
// state sized for the live replicas it last heard of; a user's call never
// fails because Redis is down. A restarted Redis without persistence
// starts from an empty state: windows and day counts refill from then on,
// and replicas re-publish what they learn next. Neither the Store nor its
// scripts store, log or return an API key.
//
// # Security
//
// Anyone who can write the fleet's keys can steer it: plant a low FactLimit
// or a long FactCoolDown (the fleet then sends a model nothing), fill a
// model's window (the fleet then waits or cascades), or hold a probe slot.
// No API key is there to read (project ids and idempotency keys are
// hashes), but answers (AnswerStore, NewAnswerCache) are, and prompts in
// the open batches' handles (JobStore), which hold their requests. Give
// each project a Redis user of its own whose ACL allows only its keys and
// channel, for instance
//
//	ACL SETUSER fleet-p on >secret ~geminiguard:{P}:* &geminiguard:{P}:changed +@read +@write +@scripting +@pubsub -@dangerous
//
// with P the project's id (the hash between braces in the fleet's keys), and
// connect with TLS and that user through go-redis's own options
// (redis.Options.TLSConfig, Username, Password).
package redisstore
