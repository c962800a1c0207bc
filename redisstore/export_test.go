package redisstore

// Tests on a loaded -race run may lengthen the answer cache's timeout,
// where a round trip can outlast a production Redis's (CacheTimeout).
var CacheTimeout = &cacheTimeout
