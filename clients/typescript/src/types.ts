// @portcullis/client/types: the message and enum types protoc-gen-es generated from
// proto/portcullis/v1 (governor.proto, admin.proto) at build time, with their schemas,
// for a gateway that wants to read or build the wire messages itself (with
// `@bufbuild/protobuf`'s `create`, `toBinary`, `fromBinary`). The client needs none
// of this: its calls take and give plain values.

export * from './gen/portcullis/v1/governor_pb';
export * from './gen/portcullis/v1/admin_pb';
