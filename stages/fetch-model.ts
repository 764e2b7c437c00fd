import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('fetch-model', 'Fetch or generate the source checkpoint and check its hashes', 'issue 3');
