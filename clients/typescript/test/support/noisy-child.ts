// Run by client.test.ts with grpc-js tracing at its loudest (GRPC_TRACE=all,
// GRPC_VERBOSITY=DEBUG): calls Verify and CheckPassword with a known password through
// every kind of failure and prints every answer and event. The parent asserts the
// password appears nowhere in this process's output.

import { Client, ClientEvent } from '../../src';
import { GARBAGE, closedPort, startGrpcEndpoint, startRawServer } from './endpoint';

const PASSWORD = process.argv[2];

async function main(): Promise<void> {
  const endpoints = [
    await startGrpcEndpoint({ fault: { status: 3 } }),
    await startGrpcEndpoint({ fault: { status: 13 }, headersFirst: true }),
    await startGrpcEndpoint({ fault: { reset: true } }),
    await startGrpcEndpoint({ fault: { delay_ms: 2000 } }),
    await startGrpcEndpoint({ answer: { verdict: 2 } }),
    await startRawServer(GARBAGE),
  ];
  const urls = [...endpoints.map((e) => e.url), `http://127.0.0.1:${await closedPort()}`];
  for (const url of urls) {
    const events: ClientEvent[] = [];
    const client = new Client({ endpoints: [url], callTimeoutMs: 500, onEvent: (e) => events.push(e) });
    const answer = await client.verify({
      realm: 'default',
      identifier: 'user@example.com',
      password: PASSWORD,
      storedHash: '',
      clientKey: '203.0.113.7',
    });
    const check = await client.checkPassword('default', 'user@example.com', PASSWORD);
    console.log(answer, JSON.stringify(answer), check, JSON.stringify(events), client.stats());
    console.error(answer);
    client.close();
  }
  for (const e of endpoints) await e.close();
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error('noisy child failed', e);
    process.exit(1);
  },
);
