import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('quality', 'Measure held-out perplexity and agreement from the packed shards', 'issue 4');
