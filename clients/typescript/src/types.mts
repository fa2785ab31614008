// @portcullis/client/types as an ES module: the CommonJS build's objects, re-exported.

export * from './types.js';
