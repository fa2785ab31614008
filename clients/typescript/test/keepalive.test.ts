// Keepalive against the real daemon: the client reaches a daemon through a TCP proxy;
// the daemon is stopped (SIGSTOP: its socket stays open, the kernel still acknowledges
// every byte, nothing answers), as a dropped NAT flow or a frozen host looks to the
// client. Calls are denied within the call deadline. The proxy then sends new
// connections to a second daemon: the client with keepalive finds its connection dead
// by an unanswered PING, connects anew and is answered; the same client without
// keepalive stays on the dead connection and keeps denying.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import * as net from 'node:net';

import { Answer, Client } from '../src';
import { Daemon, startDaemon } from './support/daemon';

/** A TCP proxy whose upstream port can change: connections it already holds keep theirs. */
async function switchingProxy(upstreamPort: number) {
  let upstream = upstreamPort;
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((down) => {
    connections += 1;
    const up = net.connect(upstream, '127.0.0.1');
    for (const s of [down, up]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    down.pipe(up);
    up.pipe(down);
    down.on('close', () => up.destroy());
    up.on('close', () => down.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    connections: () => connections,
    switchTo: (port: number) => {
      upstream = port;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

const DEADLINE = 1500;
/** How long the client with keepalive may take to be answered again (a ping each 1 s, 1 s to answer it, a connect). */
const RECOVERY_BOUND_MS = 15000;

function id(): string {
  return `keepalive-${randomUUID().slice(0, 8)}@example.com`;
}

/** Admits until one is allowed or `boundMs` passed; the allowing answer, or the last deny. */
async function admitUntilAllowed(c: Client, boundMs: number): Promise<{ answer: Answer; tries: number }> {
  const until = performance.now() + boundMs;
  let tries = 0;
  for (;;) {
    tries += 1;
    const answer = await c.admit('default', id());
    if (answer.isAllowed() || performance.now() > until) return { answer, tries };
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('keepalive: a stopped daemon is a deny within the deadline, and the client recovers on a new connection to the daemon that answers', async () => {
  let first: Daemon | undefined;
  let second: Daemon | undefined;
  let proxy: Awaited<ReturnType<typeof switchingProxy>> | undefined;
  const clients: Client[] = [];
  try {
    first = await startDaemon();
    second = await startDaemon();
    proxy = await switchingProxy(first.port);
    // ejectAfter is high so that only keepalive, not the breaker, decides which
    // connection the next call uses.
    const common = { endpoints: [proxy.url], callTimeoutMs: DEADLINE, ejectAfter: 1000 };
    const withKeepalive = new Client({ ...common, keepaliveTimeMs: 1000, keepaliveTimeoutMs: 1000 });
    // The control: keepalive as good as off (a ping after 24 days).
    const without = new Client({ ...common, keepaliveTimeMs: 2 ** 31 - 1 });
    clients.push(withKeepalive, without);
    for (const c of clients) {
      assert.equal((await c.admit('default', id())).decision, 'allow', 'both are connected to the first daemon');
    }
    const connectedBefore = proxy.connections();
    assert.equal(connectedBefore, 2);

    first.process.kill('SIGSTOP');
    for (const c of clients) {
      const started = performance.now();
      const answer = await c.verify({ realm: 'default', identifier: id(), password: 'guess', storedHash: '', clientKey: '198.51.100.40' });
      const elapsed = performance.now() - started;
      assert.deepEqual([answer.decision, answer.retryable], ['deny', true], 'no answer: a retryable deny');
      assert.ok(elapsed < DEADLINE + 400, `denied after ${elapsed.toFixed(0)} ms`);
    }

    proxy.switchTo(second.port);
    const recovered = await admitUntilAllowed(withKeepalive, RECOVERY_BOUND_MS);
    assert.equal(recovered.answer.decision, 'allow', `the client with keepalive was still denied after ${RECOVERY_BOUND_MS} ms`);
    assert.ok(proxy.connections() > connectedBefore, 'it was answered on a new connection');

    // The control, over as many tries: still on the dead connection, still denied.
    const control = await admitUntilAllowed(without, 0);
    assert.equal(control.answer.decision, 'deny', 'without keepalive the client should still be on the dead connection');
    for (let i = 0; i < 2; i++) {
      assert.equal((await without.admit('default', id())).decision, 'deny');
    }
  } finally {
    for (const c of clients) c.close();
    if (first !== undefined) {
      first.process.kill('SIGCONT');
      await first.stop();
    }
    await second?.stop();
    await proxy?.close();
  }
});
