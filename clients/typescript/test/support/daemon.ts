// The real daemon for the tests: `portcullis serve` on the embedded store in a temp
// directory, on a free loopback port, with a key secret of its own.

import { ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { Client, ClientTls } from '../../src';
import { closedPort } from './endpoint';

/** PORTCULLIS_BINARY, else the repository's target/debug/portcullis (scripts/ensure-daemon.js builds it when missing). */
export function daemonBinary(): string {
  const fromEnv = process.env['PORTCULLIS_BINARY'];
  const binary = fromEnv ? path.resolve(fromEnv) : path.resolve(__dirname, '..', '..', '..', '..', '..', 'target', 'debug', 'portcullis');
  if (!fs.existsSync(binary)) {
    throw new Error(`no daemon binary at ${binary}: run \`cargo build\` at the repository root, or set PORTCULLIS_BINARY`);
  }
  return binary;
}

export interface Daemon {
  binary: string;
  port: number;
  url: string;
  process: ChildProcess;
  log: () => string;
  /** `portcullis inspect`'s `failures:` for an identifier of the default realm. */
  failures: (identifier: string) => Promise<number>;
  stop: () => Promise<void>;
}

/**
 * Starts a daemon. `configToml` (optional) is written to a file in the temp directory
 * and passed as `--config` (realms and their settings; the store, listen address and
 * admin listener stay the command line's). A daemon whose configuration has `[tls]` is
 * asked whether it is ready over `https://localhost:PORT` with `readyTls` (a client
 * certificate it accepts, for mutual TLS).
 */
export async function startDaemon(configToml?: string, readyTls?: ClientTls): Promise<Daemon> {
  const binary = daemonBinary();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'portcullis-ts-daemon-'));
  const configArgs: string[] = [];
  if (configToml !== undefined) {
    const configFile = path.join(dataDir, 'portcullis.toml');
    fs.writeFileSync(configFile, configToml);
    configArgs.push('--config', configFile);
  }
  const port = await closedPort();
  const url = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = {
    PATH: process.env['PATH'],
    HOME: process.env['HOME'] ?? dataDir,
    PORTCULLIS_KEY_SECRET: randomBytes(32).toString('hex'),
  };
  const child = spawn(
    binary,
    ['serve', ...configArgs, '--listen', `127.0.0.1:${port}`, '--admin-listen', '', '--data-dir', path.join(dataDir, 'data')],
    {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let log = '';
  child.stdout?.on('data', (d: Buffer) => (log += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (log += d.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));

  // Ready when it answers an Admit.
  const probe = new Client({
    endpoints: [readyTls === undefined ? url : `https://localhost:${port}`],
    callTimeoutMs: 500,
    ejectAfter: 1000,
    tls: readyTls,
  });
  try {
    const until = Date.now() + 20000;
    for (;;) {
      if (child.exitCode !== null) {
        throw new Error(`the daemon exited (${child.exitCode}) before it answered:\n${log}`);
      }
      const a = await probe.admit('default', 'readiness-probe@example.com');
      if (a.decision === 'allow') break;
      if (Date.now() > until) {
        throw new Error(`the daemon did not answer within 20 s:\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } catch (e) {
    child.kill('SIGKILL');
    fs.rmSync(dataDir, { recursive: true, force: true });
    throw e;
  } finally {
    probe.close();
  }

  return {
    binary,
    port,
    url,
    process: child,
    log: () => log,
    failures: async (identifier: string) => {
      // inspect exits 1 when the door is closed; its output is the same shape.
      const r = await promisify(execFile)(binary, ['inspect', '--addr', url, '--realm', 'default', '--identifier', identifier], {
        env,
        timeout: 10000,
      }).catch((e: { stdout?: string; code?: number }) => {
        if (typeof e.stdout === 'string' && e.stdout.includes('failures:')) return { stdout: e.stdout };
        throw e;
      });
      const m = /^failures:\s*(\d+)/m.exec(r.stdout);
      if (!m) throw new Error(`portcullis inspect printed no failures line:\n${r.stdout}`);
      return Number(m[1]);
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
