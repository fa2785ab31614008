// A gateway process of its own for express.test.ts: `node express-child.js DAEMON_URL`
// starts the Express test app (support/express-app.ts) on a free port, prints
// `{"url": ...}` on one line, and serves until its standard input closes.

import { startApp } from './express-app';

async function main(): Promise<void> {
  const app = await startApp({ daemonUrl: process.argv[2] });
  process.stdout.write(`${JSON.stringify({ url: app.url, pid: process.pid })}\n`);
  process.stdin.resume();
  process.stdin.on('end', () => {
    void app.close().then(() => process.exit(0));
  });
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
