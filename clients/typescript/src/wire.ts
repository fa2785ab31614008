// The wire: the Governor service's methods for @grpc/grpc-js, from the types
// protoc-gen-es generated out of proto/ at build time (buf.gen.yaml). Requests are
// built and answers read as those generated types, enums as the generated enums: no
// field name is a string key and no enum number is written here.
//
// protobuf-es keeps proto3 enums open: a value this client does not know arrives as
// that number (never mapped to a name or dropped), so comparing with the allowing
// member denies it. Absent fields read as their zero values (proto3 omits zeros on the
// wire), so an empty answer reads as DECISION_UNSPECIFIED, a deny.

import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { DescMessage, MessageInitShape, MessageShape } from '@bufbuild/protobuf';

import { Governor } from './gen/portcullis/v1/governor_pb';

/** The Governor service's methods as generated, by their local (lowerCamelCase) names. */
type GovernorMethods = (typeof Governor)['method'];

/** A Governor method's local name: `admit`, `recordAttempt`, `verify`, …. */
export type MethodName = keyof GovernorMethods;

/** The request message of method `M`, as a plain initializer. */
export type RequestInit<M extends MethodName> = MessageInitShape<GovernorMethods[M]['input']>;

/** The response message of method `M`. */
export type Response<M extends MethodName> = MessageShape<GovernorMethods[M]['output']>;

/** One unary method for grpc-js: its path, the request encoder and the answer decoder. */
export interface Method<M extends MethodName> {
  /** The gRPC method name (`Verify`), for events. */
  readonly name: string;
  /** `/portcullis.v1.Governor/Verify`. */
  readonly path: string;
  /** The request's bytes. Throws on a value the field cannot hold (the caller's bug). */
  encode(request: RequestInit<M>): Buffer;
  /** The answer, decoded. Throws on bytes that are no such message. */
  decode(bytes: Buffer): Response<M>;
  /** The request's fields by their proto names, a message's fields after its own and a dot (`account.identifier`). */
  readonly fields: ReadonlySet<string>;
}

/** The proto names of `message`'s fields, and of its message fields' fields (`account.realm`). */
function fieldNames(message: DescMessage, prefix = '', depth = 0): string[] {
  return message.fields.flatMap((f) => {
    const name = `${prefix}${f.name}`;
    return f.fieldKind === 'message' && depth < 2 ? [name, ...fieldNames(f.message, `${name}.`, depth + 1)] : [name];
  });
}

/** The method `name` of `portcullis.v1.Governor`. */
export function governorMethod<M extends MethodName>(name: M): Method<M> {
  const desc = Governor.method[name];
  const input = desc.input as DescMessage;
  const output = desc.output as DescMessage;
  return {
    name: desc.name,
    path: `/${Governor.typeName}/${desc.name}`,
    encode: (request) => {
      // A view of the encoder's own bytes, not a copy: zeroing it after the call wipes
      // the only copy of a password the request carried.
      const bytes = toBinary(input, create(input, request as MessageInitShape<DescMessage>));
      return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    },
    decode: (bytes) => fromBinary(output, bytes) as Response<M>,
    fields: new Set(fieldNames(input)),
  };
}
