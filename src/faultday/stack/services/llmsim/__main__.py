"""``python -m faultday.stack.services.llmsim --host 127.0.0.1 --port P --model NAME``."""

from faultday.stack.services.llmsim.cli import main

if __name__ == "__main__":
    main()
