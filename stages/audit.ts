import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('audit', 'Independently verify the submission gates from the stored bytes', 'issue 3');
