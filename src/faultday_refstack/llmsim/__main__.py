"""``python -m faultday_refstack.llmsim --host 127.0.0.1 --port P --model NAME``."""

from faultday_refstack.llmsim.cli import main

if __name__ == "__main__":
    main()
