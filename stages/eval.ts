import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('eval', 'Score benchmark-style questions against the served model', 'issue 7');
