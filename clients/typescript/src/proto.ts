// The wire types, loaded at run time from the repository's proto/ directory with
// @grpc/proto-loader: the .proto files stay the one source of the contract (no
// generated code to keep in step, no protoc to install).
//
// Enums stay numbers (no `enums: String`), so a value this client does not know
// arrives as that number and is denied, never mapped to a name or dropped; `defaults`
// fills absent fields (proto3 omits zeros on the wire), so an empty answer reads as
// DECISION_UNSPECIFIED, a deny.

import * as path from 'node:path';
import * as fs from 'node:fs';
import * as protoLoader from '@grpc/proto-loader';

/** One unary method: its path and (de)serializers. */
export interface Method {
  path: string;
  requestSerialize: (value: object) => Buffer;
  responseDeserialize: (bytes: Buffer) => Record<string, unknown>;
  requestDeserialize: (bytes: Buffer) => Record<string, unknown>;
  responseSerialize: (value: object) => Buffer;
}

export type GovernorMethod =
  | 'Admit'
  | 'RecordAttempt'
  | 'Verify'
  | 'ClearAttempts'
  | 'CheckPassword'
  | 'RecordFlowAttempt'
  | 'ClearFlow'
  | 'ConfirmDevice';

/** Where proto/ is: the option, then PORTCULLIS_PROTO_DIR, then the repository's (clients/typescript/dist/src → proto/). */
export function defaultProtoDir(): string {
  const fromEnv = process.env['PORTCULLIS_PROTO_DIR'];
  if (fromEnv) {
    return fromEnv;
  }
  return path.resolve(__dirname, '..', '..', '..', '..', 'proto');
}

const cache = new Map<string, protoLoader.PackageDefinition>();

export function loadPackage(protoDir: string): protoLoader.PackageDefinition {
  let def = cache.get(protoDir);
  if (def === undefined) {
    const files = ['portcullis/v1/governor.proto', 'portcullis/v1/admin.proto'].filter((f) =>
      fs.existsSync(path.join(protoDir, f)),
    );
    if (!files.includes('portcullis/v1/governor.proto')) {
      throw new Error(
        `portcullis/v1/governor.proto not found under ${protoDir} (set the client's protoDir or PORTCULLIS_PROTO_DIR to the repository's proto/ directory)`,
      );
    }
    def = protoLoader.loadSync(files, {
      includeDirs: [protoDir],
      keepCase: true,
      longs: String,
      defaults: true,
      oneofs: true,
    });
    cache.set(protoDir, def);
  }
  return def;
}

export function method(def: protoLoader.PackageDefinition, service: string, name: string): Method {
  const svc = def[service] as protoLoader.ServiceDefinition | undefined;
  const m = svc?.[name];
  if (m === undefined) {
    throw new Error(`${service}/${name} is not in the loaded proto files`);
  }
  return {
    path: m.path,
    requestSerialize: m.requestSerialize as (value: object) => Buffer,
    responseDeserialize: m.responseDeserialize as (bytes: Buffer) => Record<string, unknown>,
    requestDeserialize: m.requestDeserialize as (bytes: Buffer) => Record<string, unknown>,
    responseSerialize: m.responseSerialize as (value: object) => Buffer,
  };
}
