// A gateway process of its own for daemon.test.ts: `node gateway-child.js URL OP IDENTIFIER [COUNT]`
// makes COUNT calls of OP (record | admit) through the client and prints one JSON
// answer a line.

import { Client } from '../../src';

async function main(): Promise<void> {
  const [url, op, identifier, count = '1'] = process.argv.slice(2);
  const client = new Client({ endpoints: [url], callTimeoutMs: 5000 });
  for (let i = 0; i < Number(count); i++) {
    const answer =
      op === 'admit'
        ? await client.admit('default', identifier)
        : await client.recordAttempt('default', identifier, { clientKey: '198.51.100.7' });
    process.stdout.write(`${JSON.stringify({ pid: process.pid, decision: answer.decision, retryable: answer.retryable })}\n`);
  }
  client.close();
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
