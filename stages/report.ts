import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('report', 'Gather evidence records, write the reviewer guide and HTML report', 'issue 6');
