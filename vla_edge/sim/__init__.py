"""MuJoCo tabletop suite, scripted expert, demonstrations and the closed-loop evaluator."""
