//! One call of a Lua script, as the store sends it (`scripts`' `call()` builds it).

/// One call of a script: its `EVALSHA` command, every key and argument written into the
/// command's one buffer as they are added (no buffer of its own each, as
/// `redis::ScriptInvocation` makes), and the script to load on `NOSCRIPT`.
pub(crate) struct Invocation {
    script: &'static redis::Script,
    evalsha: redis::Cmd,
}

impl Invocation {
    /// `EVALSHA <sha1> <keys>`, room made for `keys` keys and `args` arguments.
    pub(super) fn new(script: &'static redis::Script, keys: usize, args: usize) -> Self {
        // Keys are about 60 bytes, arguments at most a few dozen: one allocation of
        // the buffer for nearly every call.
        let mut evalsha = redis::Cmd::with_capacity(3 + keys + args, 64 * (keys + args) + 64);
        evalsha.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Self { script, evalsha }
    }

    /// Adds the next key (`KEYS[i]`). The caller adds exactly the count given to `new`.
    pub(super) fn key(&mut self, key: impl redis::ToRedisArgs) {
        self.evalsha.arg(key);
    }

    /// Adds the next argument (`ARGV[i]`).
    pub(super) fn arg(&mut self, arg: impl redis::ToRedisArgs) {
        self.evalsha.arg(arg);
    }

    /// The `EVALSHA` command, to pipeline.
    pub(crate) fn command(&self) -> &redis::Cmd {
        &self.evalsha
    }

    /// Runs the script; on `NOSCRIPT` (it did not run) loads it and sends it again,
    /// as `redis::ScriptInvocation::invoke_async` does.
    ///
    /// # Errors
    /// Redis's, or the connection's.
    pub(crate) async fn invoke_async<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self.evalsha.query_async(conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.load_async(conn).await?;
                self.evalsha.query_async(conn).await
            }
            other => other,
        }
    }

    /// `SCRIPT LOAD` of the script (on every master of a cluster, as redis-rs routes it).
    ///
    /// # Errors
    /// Redis's, or the connection's.
    pub(crate) async fn load_async(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<()> {
        self.script.load_async(conn).await.map(drop)
    }
}
